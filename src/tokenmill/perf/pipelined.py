"""A pipeline-parallel prefill worker's steps on the cost model (``PipelinedCost``).

Why apart from ``perf.roofline``: the cost model prices one step of one worker whose layers run
in sequence; a disaggregated prefill worker split over ``pp`` stages with chunks in flight is
occupied per step by its busiest stage only, which the replay of a prefill worker
(``perf.replay_disaggregated``) needs and nothing else does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tokenmill.hardware import GPU
from tokenmill.perf.batch import BatchShape, DecodeSum, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import CostModel, Features
from tokenmill.perf.stride_executor import step_seconds
from tokenmill.plan.layout import Layout

__all__ = ["PipelinedCost"]

#: Demands a stage does not divide: one engine step, its sampled tokens, the GEMMs' rows (their
#: efficiency), per-request latencies.
_PER_STEP = ("steps", "sampled", "gemm_rows", "prefill_seqs", "requests", "xfer_count", "xfer_bw_s")
_HOPS = ("pp_count", "pp_bw_s", "pp_net_count", "pp_net_bw_s")


class PipelinedCost(CostModel):
    """A pipeline-parallel prefill worker with chunks in flight (SGLang's chunked pipeline: the next
    chunk enters stage 1 while this one is in stage 2; a chunk's attention needs only the earlier
    chunks' cache of its own layers, ready by then). A step occupies the worker for its busiest
    stage, ⌈L/N⌉ of L layers, and one hop; the N − 1 stages after it are latency
    (``drain_seconds``), added to each first token by the caller."""

    def __init__(self, model: Any, gpu: GPU, layout: Layout, params: PerfParams | None = None) -> None:
        super().__init__(model, gpu, layout, params)
        layers = max(1, model.num_layers)
        self.stage_share = math.ceil(layers / layout.pp) / layers

    def features(self, shape: BatchShape) -> Features:
        f = super().features(shape)
        hops = max(1, self.layout.pp - 1)
        return Features(
            *(
                v if k in _PER_STEP else v / hops if k in _HOPS else v * self.stage_share
                for k, v in zip(Features._fields, f, strict=True)
            )
        )

    def cohort_decode_attention(self, agg: DecodeSum) -> tuple[float, float]:
        """The stage's share of a cohort's decode attention, as ``features`` scales it (executors
        that keep a step's other demands ask for these two alone)."""
        flop_s, mem_s = super().cohort_decode_attention(agg)
        return flop_s * self.stage_share, mem_s * self.stage_share

    def listed_decode_attention(self, dec: Sequence[DecodeWork]) -> tuple[float, float]:
        """The stage's share of listed decodes' attention, as ``features`` scales it."""
        flop_s, mem_s = super().listed_decode_attention(dec)
        return flop_s * self.stage_share, mem_s * self.stage_share

    def drain_seconds(self, isl: int, chunk_tokens: int, params: PerfParams) -> tuple[Features, float]:
        """The N − 1 stages a prompt's last chunk still crosses after its step: (demands, seconds)."""
        last = isl - chunk_tokens * ((isl - 1) // chunk_tokens)
        f = self.features(BatchShape(prefill=(PrefillWork(last, isl - last, True),)))
        f = f._replace(steps=0.0, sampled=0.0)  # the engine step and its sampling are counted once
        n = self.layout.pp - 1
        drain = Features(*(v * n for v in f))
        return drain, step_seconds(drain, params)
