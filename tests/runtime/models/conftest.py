"""Session-wide tiny checkpoints (built once: transformers' own save_pretrained is the slow part).

torch and transformers are imported lazily so that a CI without them skips these tests cleanly
(each test module starts with ``pytest.importorskip``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    """The tiny models are all small ops: one thread is as fast, and immune to busy neighbours
    (with two OpenMP threads on a loaded 2-core machine these tests ran 5-10x slower)."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def kimi_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(directory, transformers model) of a tiny Kimi Linear saved as one model.safetensors."""
    from tests.runtime.models import checkpoints

    path = tmp_path_factory.mktemp("kimi_linear")
    return path, checkpoints.kimi_linear(path)


@pytest.fixture(scope="session")
def deepseek_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(directory, transformers model) of a tiny DeepSeek-V3 saved in shards with an index."""
    from tests.runtime.models import checkpoints

    path = tmp_path_factory.mktemp("deepseek_v3")
    return path, checkpoints.deepseek_v3(path, max_shard_size="200KB")
