"""The cost model's efficiency constants: each a physical quantity with a documented prior.

Priors are typical of well-tuned serving engines on NVIDIA datacenter GPUs (cuBLAS/CUTLASS GEMMs
reach 60–75 % of dense peak on large shapes, decode-time weight streaming 70–85 % of HBM
bandwidth, NCCL all-reduce a few µs of latency within an NVLink domain). They are starting points
for calibration (``tokenmill calibrate``, a later issue), not fitted values.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class PerfParams:
    matmul_efficiency: float = 0.55  # fraction of dense peak FLOP/s reached by large GEMMs
    moe_matmul_efficiency: float = 0.45  # grouped expert GEMMs
    attention_efficiency: float = 0.40  # attention and linear-attention kernels (FLOP-bound part)
    weight_bandwidth_efficiency: float = 0.75  # streaming weights from HBM
    cache_bandwidth_efficiency: float = 0.60  # reading KV pages / linear-attention state
    collective_bandwidth_efficiency: float = 0.70  # of the link bandwidth per direction
    collective_latency_s: float = 8e-6  # one collective inside a scale-up (NVLink) domain
    network_latency_s: float = 25e-6  # one collective that crosses nodes over the NIC
    step_overhead_s: float = 1.5e-3  # scheduling + launch per engine step
    prefill_layer_overhead_s: float = 30e-6  # per layer of a step that runs prefill (no CUDA graph)
    decode_layer_overhead_s: float = 8e-6  # per layer of a pure decode step
    sampling_per_token_s: float = 2e-6  # logits processing and sampling per produced token
    draft_step_overhead_s: float = 0.6e-3  # drafter launch per speculative step

    def to_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}

    def updated(self, **changes: Any) -> PerfParams:
        return replace(self, **changes)
