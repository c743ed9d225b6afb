"""Where tokenmill keeps what it builds or measures on this machine (no torch, no HTTP).

One root, ``$TOKENMILL_CACHE`` or ``~/.cache/tokenmill``: the embedded default checkpoint, and the
hardware entries ``tokenmill calibrate local`` measures (``hardware/<name>.toml`` with the fitted
cost-model constants beside it in ``hardware/<name>.perf.json``).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("TOKENMILL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tokenmill"


def user_hardware_dir() -> Path:
    """Hardware entries measured on this machine; ``load_gpu`` looks here after the bundled catalog."""
    return cache_root() / "hardware"


def _looks(path: Path, test: str) -> bool:
    try:
        return bool(getattr(path, test)())
    except (OSError, ValueError):  # a name too long, a NUL byte: the OS cannot look, so it is not there
        return False


def path_exists(path: Path) -> bool:
    """``path.exists()``, False where the OS refuses to look (a 300-character name, a NUL byte):
    names come from flags and CSV cells, and asking about one must answer, not raise."""
    return _looks(path, "exists")


def path_is_file(path: Path) -> bool:
    """``path.is_file()``, False where the OS refuses to look (``path_exists``)."""
    return _looks(path, "is_file")


def path_is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where the OS refuses to look (``path_exists``)."""
    return _looks(path, "is_dir")
