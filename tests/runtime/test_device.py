"""``--device``: which torch device the engine runs on (runtime/device.py)."""

from __future__ import annotations

import pytest
import torch

from tokenmill.errors import TokenmillError
from tokenmill.runtime.device import device_memory_bytes, resolve_device

GPU = torch.cuda.is_available()


@pytest.mark.parametrize("name", ["cpu", "CPU", " cpu "])
def test_cpu_is_the_cpu(name: str) -> None:
    assert resolve_device(name) == "cpu"


def test_auto_is_the_gpu_when_torch_sees_one_and_the_cpu_otherwise() -> None:
    assert resolve_device("auto") == ("cuda" if GPU else "cpu")


@pytest.mark.parametrize("name", ["gpu", "cuda0", "cpu:0", "auto:1", "cuda:", "cuda:-1", "mps", ""])
def test_an_unknown_device_is_one_line_naming_the_flag_and_what_is_allowed(name: str) -> None:
    with pytest.raises(TokenmillError) as exc:
        resolve_device(name)
    assert str(exc.value) == f"--device must be one of auto|cpu|cuda|cuda:N (got {name!r})"


@pytest.mark.skipif(GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_says_so_and_what_to_use_instead(name: str) -> None:
    with pytest.raises(TokenmillError) as exc:
        resolve_device(name)
    assert str(exc.value) == f"--device {name}: torch sees no CUDA device here; use --device cpu (or auto)"


@pytest.mark.skipif(not GPU, reason="needs a GPU")
def test_a_gpu_index_past_the_last_is_refused() -> None:
    count = torch.cuda.device_count()
    assert resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(TokenmillError, match=f"torch sees {count} CUDA device"):
        resolve_device(f"cuda:{count}")


def test_the_cpu_leaves_its_memory_to_the_caller() -> None:
    assert device_memory_bytes("cpu") is None


@pytest.mark.parametrize(("name", "kind"), [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:3", "cuda"), (" CUDA:0 ", "cuda")])
def test_a_device_is_of_the_cpu_or_cuda_kind(name: str, kind: str) -> None:
    from tokenmill.runtime.device import device_kind

    assert device_kind(name) == kind
