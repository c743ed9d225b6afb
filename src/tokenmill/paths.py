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
