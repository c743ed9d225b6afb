"""``Layout``: how one worker cuts a model across its GPUs, and the checks that it can.

Follows SGLang's flags: tp (``--tp-size``) GPUs per pipeline stage, ep (``--ep-size``) ≤ tp,
attention DP (``--dp-size`` with ``--enable-dp-attention``) dividing tp, DCP (``--dcp-size``)
dividing the attention-TP group, pp (``--pp-size``). A worker uses tp × pp GPUs; a deployment of
``gpus`` GPUs runs ``gpus / (tp × pp)`` identical workers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from tokenmill.errors import TokenmillError
from tokenmill.spec.model import MixerKind, ModelSpec


class PrefixCache(StrEnum):
    """SGLang's ``--mamba-radix-cache-strategy`` (``off`` = ``--disable-radix-cache``)."""

    EXTRA_BUFFER = "extra_buffer"
    EXTRA_BUFFER_LAZY = "extra_buffer_lazy"
    NO_BUFFER = "no_buffer"
    OFF = "off"


class KVDtype(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8_e4m3"

    @property
    def nbytes(self) -> int:
        return 2 if self is KVDtype.BF16 else 1

    @classmethod
    def parse(cls, value: str) -> KVDtype:
        key = value.lower()
        if key in ("auto", "bf16", "bfloat16", "fp16", "float16"):
            return cls.BF16
        if key in ("fp8", "fp8_e4m3", "e4m3"):
            return cls.FP8
        raise TokenmillError(f"--kv-cache-dtype must be one of auto|bf16|fp8_e4m3 (got {value!r})")


class StateDtype(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"

    @property
    def nbytes(self) -> int:
        return 4 if self is StateDtype.FP32 else 2

    @classmethod
    def parse(cls, value: str) -> StateDtype:
        key = value.lower()
        if key in ("fp32", "float32"):
            return cls.FP32
        if key in ("bf16", "bfloat16", "fp16", "float16"):
            return cls.BF16
        raise TokenmillError(f"--state-dtype must be one of fp32|bf16 (got {value!r})")


@dataclass(frozen=True)
class Speculation:
    """``none``, ``dspark:B`` (DSPARK drafter proposing B tokens) or ``mtp:N`` (N MTP steps)."""

    algorithm: str = "none"
    tokens: int = 0

    @property
    def enabled(self) -> bool:
        return self.algorithm != "none"

    @property
    def num_draft_tokens(self) -> int:
        """Tokens verified per pass (SGLang's ``speculative_num_draft_tokens``): proposals + 1."""
        return self.tokens + 1 if self.enabled else 0

    def __str__(self) -> str:
        return "none" if not self.enabled else f"{self.algorithm}:{self.tokens}"

    @classmethod
    def parse(cls, value: str) -> Speculation:
        text = value.strip().lower()
        if text in ("", "none", "off"):
            return cls()
        algo, _, n = text.partition(":")
        if algo not in ("dspark", "mtp") or not (n.isascii() and n.isdigit()) or int(n) <= 0:
            raise TokenmillError(f"--speculative must be none, dspark:B or mtp:N with B, N ≥ 1 (got {value!r})")
        return cls(algo, int(n))


@dataclass(frozen=True)
class Layout:
    """One worker's parallel layout and memory flags (SGLang names in the comments)."""

    tp: int = 8  # --tp-size
    ep: int = 1  # --ep-size
    pp: int = 1  # --pp-size
    dp_attention: int = 1  # --dp-size with --enable-dp-attention (1 = off)
    dcp: int = 1  # --dcp-size
    kv_cache_dtype: KVDtype = KVDtype.BF16  # --kv-cache-dtype
    state_dtype: StateDtype | None = None  # --mamba-ssm-dtype (None = the model's default)
    prefix_cache: PrefixCache = PrefixCache.EXTRA_BUFFER  # --mamba-radix-cache-strategy
    speculative: Speculation = Speculation()  # --speculative-algorithm …
    replayssm: bool = False  # --enable-linear-replayssm-spec
    mem_fraction_static: float = 0.85  # --mem-fraction-static
    pool_ratio: float | None = None  # --mamba-full-memory-ratio
    avg_request_tokens: int | None = None  # the calculator's L
    max_running_requests: int | None = None  # --max-running-requests
    page_size: int = 64  # --page-size
    # --swa-full-tokens-ratio: a sliding-window layer's cache tokens per full layer's (None: SGLang's
    # 0.8, or 1 where it keeps no separate pool: Gemma 2/3); --disable-hybrid-swa-memory reads as 1
    swa_full_tokens_ratio: float | None = None
    moe_a2a_backend: str = "none"  # --moe-a2a-backend (deepep/megamoe replicate shared experts)
    pool_budget_bytes: int | None = None  # skip the memory profile: bytes left for both pools

    @property
    def attn_tp(self) -> int:
        """GPUs that split one attention module (tp / attention-DP)."""
        return self.tp // self.dp_attention

    @property
    def gpus_per_worker(self) -> int:
        return self.tp * self.pp

    def with_(self, **changes: object) -> Layout:
        return replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.dp_attention > 1:
            parts.append(f"DPattn{self.dp_attention}")
        if self.dcp > 1:
            parts.append(f"DCP{self.dcp}")
        if self.kv_cache_dtype is KVDtype.FP8:
            parts.append("fp8-KV")
        if self.speculative.enabled:
            parts.append(str(self.speculative) + ("+replayssm" if self.replayssm else ""))
        return " ".join(parts)


#: The most GPUs one deployment is planned on: far past any rack or cluster serving one model
#: today, and a bound on what a search enumerates (its layouts divide the count).
MAX_GPUS = 65_536


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise TokenmillError(f"{name} must be a positive integer (got {value})")


#: The largest --pool-ratio (state pool ÷ KV pool): a million to one is already all state; past
#: ~1e300 the split's arithmetic overflowed.
MAX_POOL_RATIO = 1e6


def check_pool_ratio(ratio: float | None) -> None:
    """``--pool-ratio`` is a number > 0 and at most ``MAX_POOL_RATIO`` (or absent)."""
    if ratio is not None and not 0 < ratio <= MAX_POOL_RATIO:  # also refuses nan and inf
        raise TokenmillError(f"--pool-ratio must be a number > 0 and at most {MAX_POOL_RATIO:,.0f} (got {ratio})")


def check_gpus(gpus: int) -> None:
    """``--gpus`` is 1 to ``MAX_GPUS``."""
    if not 0 < gpus <= MAX_GPUS:
        raise TokenmillError(f"--gpus must be a positive integer up to {MAX_GPUS:,} (got {gpus})")


def validate_layout(layout: Layout, model: ModelSpec, gpus: int) -> None:
    """Raise a one-line ``TokenmillError`` naming the flag when the layout cannot run the model."""
    check_gpus(gpus)
    for name, value in (
        ("--tp", layout.tp),
        ("--ep", layout.ep),
        ("--pp", layout.pp),
        ("--dp-attention", layout.dp_attention),
        ("--dcp", layout.dcp),
        ("--page-size", layout.page_size),
    ):
        _check_positive(name, value)
    if not 0.0 < layout.mem_fraction_static < 1.0:
        raise TokenmillError(f"--mem-fraction-static must be above 0 and below 1 (got {layout.mem_fraction_static})")
    check_pool_ratio(layout.pool_ratio)
    swa = layout.swa_full_tokens_ratio
    if swa is not None and not 0.0 < swa <= 1.0:
        raise TokenmillError(f"--swa-full-tokens-ratio must be above 0 and at most 1 (got {swa})")
    if layout.avg_request_tokens is not None and layout.avg_request_tokens <= 0:
        raise TokenmillError(f"--avg-request-tokens must be a positive integer (got {layout.avg_request_tokens})")
    if layout.max_running_requests is not None and layout.max_running_requests <= 0:
        raise TokenmillError(f"--max-running-requests must be positive (got {layout.max_running_requests})")
    if layout.pool_budget_bytes is not None and layout.pool_budget_bytes <= 0:
        raise TokenmillError("--pool-budget-gib must be > 0")
    if gpus % layout.gpus_per_worker:
        raise TokenmillError(
            f"--gpus {gpus} is not a multiple of tp × pp = {layout.tp} × {layout.pp} = {layout.gpus_per_worker}"
        )
    if layout.tp % layout.dp_attention:
        raise TokenmillError(f"--dp-attention must divide --tp {layout.tp} (got {layout.dp_attention})")
    if layout.tp % layout.ep:
        raise TokenmillError(f"--ep must divide --tp {layout.tp} (got {layout.ep})")
    attn_tp = layout.attn_tp
    if attn_tp % layout.dcp:
        raise TokenmillError(f"--dcp must divide the attention-TP size tp/dp = {attn_tp} (got {layout.dcp})")
    if layout.pp > model.num_layers:
        raise TokenmillError(f"--pp must be at most the {model.num_layers} layers (got {layout.pp})")
    if layout.moe_a2a_backend not in ("none", "deepep", "megamoe"):
        raise TokenmillError(f"--moe-a2a-backend must be none|deepep|megamoe (got {layout.moe_a2a_backend!r})")
    heads = None
    if model.mla is not None:
        heads = model.mla.num_heads
    elif model.gqa is not None:
        heads = model.gqa.num_heads
    if heads is not None and heads % attn_tp:
        raise TokenmillError(f"--tp must divide the {heads} attention heads (attention TP = {attn_tp})")
    if model.linear is not None and model.linear.num_heads % attn_tp:
        raise TokenmillError(
            f"--tp must divide the {model.linear.num_heads} {model.linear.kind.value.upper()} heads "
            f"(attention TP = {attn_tp})"
        )
    if model.gqa is not None and model.mla is None:
        kv = model.gqa.num_kv_heads
        if kv % attn_tp and attn_tp % kv:
            raise TokenmillError(f"--tp must divide or be a multiple of the {kv} KV heads (attention TP = {attn_tp})")
    if model.moe is not None and model.moe.num_experts % layout.ep:
        raise TokenmillError(f"--ep must divide the {model.moe.num_experts} routed experts (got {layout.ep})")
    if layout.dcp > 1 and not model.layers_with(MixerKind.MLA, MixerKind.GQA):
        raise TokenmillError("--dcp needs full-attention layers; this model has none")
    spec = layout.speculative
    if spec.algorithm == "dspark" and model.model_type != "kimi_k3":
        raise TokenmillError("--speculative dspark:B is only known for kimi-k3 (its DSPARK drafter)")
    if spec.algorithm == "mtp" and model.num_nextn_layers == 0:
        raise TokenmillError(f"--speculative mtp:N needs MTP layers; {model.name} has num_nextn_predict_layers = 0")
    if layout.replayssm and not (spec.enabled and model.linear is not None):
        raise TokenmillError("--replayssm needs speculative decoding on a model with linear-attention layers")
