"""The tensor inventory: every weight of a model, with its kind, shape, layers and how it shards.

A ``Tensor`` stands for one weight repeated over ``layers`` (and ``copies`` per layer, e.g. one per
routed expert). Its ``shard`` says how SGLang cuts it across a worker's GPUs, which is what the
planner needs to put bytes on GPUs; its ``storage`` says how many bytes it takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from tokenmill.spec.formats import Storage, tensor_bytes


class TensorKind(StrEnum):
    """What a weight is for. The inventory and the memory bars group bytes by these."""

    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION_KDA = "attention_kda"
    ATTENTION_GDN = "attention_gdn"
    ATTENTION_MAMBA = "attention_mamba"
    ATTENTION_MLA = "attention_mla"
    ATTENTION_GQA = "attention_gqa"
    DENSE_MLP = "dense_mlp"
    SHARED_EXPERTS = "shared_experts"
    ROUTED_EXPERTS = "routed_experts"
    ROUTER = "router"
    LATENT_PROJECTIONS = "latent_projections"
    NORMS = "norms"
    VISION = "vision"
    DRAFT_MODEL = "draft_model"


class Shard(StrEnum):
    """How a worker's GPUs divide a weight (following SGLang's parallel linear layers).

    - ``attn_tp``: split over the attention tensor-parallel group (tp / attention-dp).
    - ``attn_kv``: GQA key/value projections: split over attention TP down to one KV head per GPU,
      then replicated (tp > num_kv_heads).
    - ``tp``: split over the whole tensor-parallel group (dense MLP, shared experts).
    - ``experts``: routed experts, split over tp = ep × moe-tp, whole experts or slices alike.
    - ``replicated``: a full copy on every GPU that holds the layer (ReplicatedLinear, norms).
    - ``vocab_embed`` / ``vocab_head``: the vocabulary matrices; split over tp, except that the
      embedding is replicated under DP attention.
    """

    ATTN_TP = "attn_tp"
    ATTN_KV = "attn_kv"
    TP = "tp"
    EXPERTS = "experts"
    REPLICATED = "replicated"
    VOCAB_EMBED = "vocab_embed"
    VOCAB_HEAD = "vocab_head"


@dataclass(frozen=True, slots=True)
class Tensor:
    """One weight, repeated over ``layers`` and ``copies`` per layer.

    ``name`` is the Hugging Face module path with ``{i}`` for the layer index, used to match the
    checkpoint's quantization rules. ``layers`` is empty for weights outside the layer stack
    (embedding: first pipeline stage; lm_head: last; vision: first).
    """

    name: str
    kind: TensorKind
    shape: tuple[int, ...]
    shard: Shard
    storage: Storage
    layers: tuple[int, ...] = ()
    copies: int = 1
    linear: bool = True

    @property
    def instances(self) -> int:
        """How many copies of ``shape`` the checkpoint holds."""
        return self.copies * max(1, len(self.layers))

    @property
    def params_each(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n

    @property
    def params(self) -> int:
        return self.params_each * self.instances

    @property
    def bytes_each(self) -> int:
        return tensor_bytes(self.shape, self.storage)

    @property
    def bytes(self) -> int:
        return self.bytes_each * self.instances


@dataclass(frozen=True, slots=True)
class KindTotal:
    """Parameters and bytes of one tensor kind."""

    kind: TensorKind
    params: int
    bytes: int
    formats: tuple[str, ...] = field(default=())


def totals_by_kind(tensors: Iterable[Tensor]) -> dict[TensorKind, KindTotal]:
    """Sum parameters and bytes per kind, in the enum's order, skipping empty kinds."""
    params: dict[TensorKind, int] = {}
    nbytes: dict[TensorKind, int] = {}
    fmts: dict[TensorKind, set[str]] = {}
    for t in tensors:
        params[t.kind] = params.get(t.kind, 0) + t.params
        nbytes[t.kind] = nbytes.get(t.kind, 0) + t.bytes
        fmts.setdefault(t.kind, set()).add(t.storage.fmt.value)
    return {
        kind: KindTotal(kind, params[kind], nbytes[kind], tuple(sorted(fmts[kind])))
        for kind in TensorKind
        if kind in params
    }
