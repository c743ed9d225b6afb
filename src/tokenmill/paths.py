"""Where tokenmill keeps what it builds or measures on this machine (no torch, no HTTP), and
where it finds what others keep there.

One root, ``$TOKENMILL_CACHE`` or ``~/.cache/tokenmill``: the embedded default checkpoint, and the
hardware entries ``tokenmill calibrate local`` measures (``hardware/<name>.toml`` with the fitted
cost-model constants beside it in ``hardware/<name>.perf.json``). The Hugging Face hub cache
(``hf_cached_config``) is read, never written: a serving machine already holds its models' configs
there.
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


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache as ``huggingface_hub`` finds it: ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache`` by default)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface" / "hub"


def hf_cached_config(repo_id: str) -> Path | None:
    """``config.json`` of the model ``repo_id`` (``org/name``) in the hub cache, or None: the
    snapshot ``refs/main`` names, else the most recently written snapshot that has one (what
    SGLang or vLLM downloaded when they served it). Nothing is fetched."""
    parts = repo_id.strip().split("/")
    if len(parts) != 2 or not all(parts) or parts[0] in (".", "..", "~"):
        return None
    repo = hf_hub_cache() / f"models--{parts[0]}--{parts[1]}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if path_is_file(ref):
        try:
            pinned = snapshots / ref.read_text().strip() / "config.json"
        except OSError:
            pinned = None
        if pinned is not None and path_is_file(pinned):
            return pinned
    if not path_is_dir(snapshots):
        return None
    found = [c for c in snapshots.glob("*/config.json") if path_is_file(c)]
    return max(found, key=lambda c: (c.stat().st_mtime, c.parent.name)) if found else None
