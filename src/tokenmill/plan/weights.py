"""Weights per GPU: each tensor kind cut the way SGLang cuts it.

Per GPU = Σ over tensors held by the GPU's pipeline stage of bytes / divisor, where the divisor is
attention TP for attention weights (KV heads stop at one per GPU), the whole TP group for the dense
MLP, shared experts and routed experts (tp = ep × moe-tp: whole experts or slices cost the same),
1 for replicated weights (latent projections, router, MLA q_a/kv_a, KDA f_a, norms, vision), and the
vocabulary split over TP (the embedding is replicated under DP attention). Shared experts are
replicated when a dispatch (all-to-all) backend runs the experts. The largest stage is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.plan.layout import Layout
from tokenmill.spec.model import ModelSpec
from tokenmill.spec.tensors import Shard, Tensor, TensorKind


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Contiguous layer ranges per pipeline stage; the remainder goes to the last stages."""
    base, extra = divmod(num_layers, pp)
    ranges: list[range] = []
    start = 0
    for stage in range(pp):
        size = base + (1 if stage >= pp - extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def shard_divisor(t: Tensor, layout: Layout, model: ModelSpec) -> int:
    """How many GPUs of one pipeline stage split tensor ``t`` under ``layout``."""
    shard = t.shard
    if shard is Shard.ATTN_TP:
        return layout.attn_tp
    if shard is Shard.ATTN_KV:
        kv_heads = model.gqa.num_kv_heads if model.gqa else layout.attn_tp
        return min(layout.attn_tp, kv_heads)
    if shard is Shard.TP:
        if t.kind is TensorKind.SHARED_EXPERTS and layout.moe_a2a_backend != "none":
            return 1
        return layout.tp
    if shard is Shard.EXPERTS or shard is Shard.VOCAB_HEAD:
        return layout.tp
    if shard is Shard.VOCAB_EMBED:
        return 1 if layout.dp_attention > 1 else layout.tp
    return 1


@dataclass(frozen=True)
class StageWeights:
    stage: int
    layers: range
    bytes_by_kind: dict[TensorKind, int]

    @property
    def total(self) -> int:
        return sum(self.bytes_by_kind.values())


def weights_per_stage(model: ModelSpec, layout: Layout) -> list[StageWeights]:
    """Bytes one GPU of each pipeline stage holds, by tensor kind."""
    stages = stage_layers(model.num_layers, layout.pp)
    result: list[StageWeights] = []
    for s, layer_range in enumerate(stages):
        by_kind: dict[TensorKind, int] = {}
        for t in model.tensors:
            if t.layers:
                n = sum(1 for i in t.layers if i in layer_range)
            elif t.kind in (TensorKind.LM_HEAD,) or t.name == "model.norm" or t.name.endswith("norm_f"):
                n = 1 if s == layout.pp - 1 else 0
            else:  # embedding, vision: first stage
                n = 1 if s == 0 else 0
            if n == 0:
                continue
            div = shard_divisor(t, layout, model)
            share = -(-(t.bytes_each * t.copies * n) // div)
            by_kind[t.kind] = by_kind.get(t.kind, 0) + share
        ordered = {k: by_kind[k] for k in TensorKind if k in by_kind}
        result.append(StageWeights(s, layer_range, ordered))
    return result


def largest_stage(model: ModelSpec, layout: Layout) -> StageWeights:
    """The stage whose GPUs hold the most weight bytes (the one that bounds the pools)."""
    return max(weights_per_stage(model, layout), key=lambda st: st.total)
