"""Which torch device the engine runs on, and how much memory it has for the pools.

``tokenmill generate`` and ``serve`` take ``--device auto|cpu|cuda|cuda:N``. ``auto`` is the GPU
when torch sees one and the CPU otherwise, so the same command serves on a laptop and on a GPU box.
A device that is not there is an error naming the flag, not a crash inside the first step.
"""

from __future__ import annotations

import re

import torch

from tokenmill.errors import TokenmillError

DEVICE_CHOICES = "auto|cpu|cuda|cuda:N"
_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def resolve_device(name: str) -> str:
    """``auto`` → ``cuda`` if torch sees a GPU, else ``cpu``; ``cuda``/``cuda:N`` checked to exist."""
    match = _DEVICE.match(name.strip().lower())
    if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
        raise TokenmillError(f"--device must be one of {DEVICE_CHOICES} (got {name!r})")
    kind, index = match.group(1), match.group(2)
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cpu":
        return "cpu"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise TokenmillError(f"--device {name}: torch sees no CUDA device here; use --device cpu (or auto)")
    if index is not None and int(index) >= count:
        raise TokenmillError(f"--device {name}: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return "cuda" if index is None else f"cuda:{int(index)}"


def device_kind(device: str) -> str:
    """``cuda`` for a CUDA device (``cuda``, ``cuda:N``), else ``cpu``: what sizes a measurement
    and names ``calibrate local``'s entry by default."""
    return "cuda" if device.strip().lower().startswith("cuda") else "cpu"


def device_memory_bytes(device: str) -> int | None:
    """Total memory of a CUDA device (bytes); ``None`` for the CPU (the caller reads the RAM)."""
    if not device.startswith("cuda"):
        return None
    return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
