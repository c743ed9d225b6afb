"""Which serving engines run on which hardware.

A fact about the engines, not a cost: TensorRT-LLM builds CUDA kernels and runs on NVIDIA GPUs
only, while SGLang and vLLM also run on AMD GPUs (ROCm) and on CPUs. A prediction, a plan or a
simulation of TensorRT-LLM on an MI355X would otherwise print numbers for a deployment nobody can
start, so every command that takes an engine and a GPU asks here first.
"""

from __future__ import annotations

from typing import Final

from tokenmill.errors import TokenmillError
from tokenmill.hardware.catalog import GPU

__all__ = ["ENGINES", "ENGINE_VENDORS", "check_engine_runs_on", "runs_on"]

#: The engines whose calibrated constants tokenmill ships (the calibration file's ``backend``).
ENGINES: Final = ("sglang", "vllm", "trtllm")

#: The vendors (a catalog file's ``vendor``) whose GPUs an engine runs on; an engine not listed
#: here runs on every vendor's (SGLang, vLLM, tokenmill's own engine).
ENGINE_VENDORS: Final[dict[str, tuple[str, ...]]] = {"trtllm": ("nvidia",)}


def runs_on(engine: str, vendor: str) -> bool:
    """Whether ``engine`` runs on GPUs of ``vendor``."""
    return vendor.strip().lower() in ENGINE_VENDORS.get(engine.strip().lower(), (vendor.strip().lower(),))


def check_engine_runs_on(engine: str, gpu: GPU, flag: str = "backend") -> None:
    """Refuse ``engine`` on ``gpu`` where the engine does not run there, in one line naming
    ``flag``, the vendors the engine needs and the engines that run on the GPU."""
    if runs_on(engine, gpu.vendor):
        return
    needs = " or ".join(ENGINE_VENDORS[engine.strip().lower()])
    others = ", ".join(e for e in ENGINES if runs_on(e, gpu.vendor))
    raise TokenmillError(
        f"{flag} {engine} runs on {needs} GPUs only, and {gpu.name} is {gpu.vendor}'s "
        f"(engines that run on it: {others})"
    )
