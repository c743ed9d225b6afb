"""The runtime reserves tokenmill assumes when it derives the pool budget from
``--mem-fraction-static`` (SGLang's ``_profile_available_bytes``):

    rest = mem_fraction_static × memory_free_before_load − weights_as_loaded − multimodal_cache

- ``memory_free_before_load`` = visible memory − CUDA context and communicators. We charge
  2.25 GiB for the CUDA context plus the TP communicator and the fused all-reduce workspace, and
  1.0 GiB for every further process group a layout creates (DCP, PP, attention-DP, EP all-to-all).
- ``weights_as_loaded`` = the computed weights × 1.016: the seed measured 195 GiB after loading
  Kimi-K3 at TP8 on B300 against 192 GiB of tensor arithmetic (loader and kernel workspaces).
- ``multimodal_cache`` = 1.0 GiB for a multimodal model (SGLang's VLM/feature cache; the cookbook
  gives up to 1 GiB on B300 with CUDA IPC).

These three values were chosen so that the seed's two boot logs (Low-Latency TP8: 303 state
slots, 561,728 tokens; Balanced DCP8: 101 requests, 936,448 tokens) come out within 1.1 % of the
logged token counts and exactly on the running-request caps; the
constants are named here and printed by ``--explain``. Give ``--pool-budget-gib`` to bypass them and
reproduce a boot log exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.plan.layout import Layout
from tokenmill.units import GiB

CUDA_CONTEXT_AND_TP_GROUP_BYTES = int(2.25 * GiB)
EXTRA_PROCESS_GROUP_BYTES = 1 * GiB
WEIGHT_LOAD_OVERHEAD = 0.016
MULTIMODAL_CACHE_BYTES = 1 * GiB


def extra_process_groups(layout: Layout) -> int:
    """Process groups beyond TP that hold NCCL buffers on every GPU."""
    return sum(
        (
            layout.dcp > 1,
            layout.pp > 1,
            layout.dp_attention > 1,
            layout.ep > 1 and layout.moe_a2a_backend != "none",
        )
    )


@dataclass(frozen=True)
class RuntimeReserves:
    context_bytes: int  # CUDA context + communicators, allocated before the weights
    weight_overhead_bytes: int  # loader/kernel workspaces counted with the weights
    multimodal_bytes: int

    @property
    def total(self) -> int:
        return self.context_bytes + self.weight_overhead_bytes + self.multimodal_bytes


def runtime_reserves(layout: Layout, weights_bytes: int, multimodal: bool) -> RuntimeReserves:
    context = CUDA_CONTEXT_AND_TP_GROUP_BYTES + EXTRA_PROCESS_GROUP_BYTES * extra_process_groups(layout)
    return RuntimeReserves(
        context_bytes=context,
        weight_overhead_bytes=round(weights_bytes * WEIGHT_LOAD_OVERHEAD),
        multimodal_bytes=MULTIMODAL_CACHE_BYTES if multimodal else 0,
    )
