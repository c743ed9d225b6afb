"""Byte units. Bytes are integers internally; only output converts, and always labels the unit.

GiB/MiB are powers of 1024 (what nvidia-smi and SGLang's logs print); GB/TB are the vendors'
powers of 1000.
"""

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 10**9
TB = 10**12


def gib(n_bytes: int | float) -> float:
    """Bytes as GiB (1024³ B)."""
    return n_bytes / GiB


def mib(n_bytes: int | float) -> float:
    """Bytes as MiB (1024² B)."""
    return n_bytes / MiB


def fmt_gib(n_bytes: int | float, digits: int = 1) -> str:
    """``'192.0 GiB'``."""
    return f"{n_bytes / GiB:,.{digits}f} GiB"


def fmt_mib(n_bytes: int | float, digits: int = 1) -> str:
    """``'53.6 MiB'``."""
    return f"{n_bytes / MiB:,.{digits}f} MiB"


def gib_to_bytes(value: float) -> int:
    """A GiB figure given by a user or a data file, as whole bytes."""
    return round(value * GiB)
