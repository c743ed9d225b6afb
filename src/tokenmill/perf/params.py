"""The cost model's constants: each a physical quantity with a documented prior.

The defaults of ``PerfParams`` are **priors**, typical of well-tuned serving engines on NVIDIA
datacenter GPUs: cuBLAS/CUTLASS GEMMs reach 50–70 % of dense peak on large shapes, decode-time
weight streaming 70–85 % of HBM bandwidth, NCCL all-reduce a few µs of latency inside an NVLink
domain and tens of µs across nodes, a CPU scheduler step of 1–2 ms that overlaps the GPU.
These defaults are also the uncalibrated roofline (``simulate`` without ``--backend``). The fit pulls
the dense GEMM efficiency and the 8-bit ratio towards published GEMM benchmark values instead (0.75
and 0.9: ``calibrate.BENCHMARK_PRIORS``), which the fitted GPUs reach anyway.

Calibrated values, fitted on measured serving results per GPU kind and per engine, ship in
``tokenmill/perf/calibrated/params.json`` (``tokenmill calibrate fit`` rewrites it) and are read
with :func:`tokenmill.perf.calibrated.params_for`; where a GPU has no fitted value it takes a
fitted sibling's kernel efficiencies and the fitted GPUs' medians for the rest
(``ParamTable.resolve``), where an engine has none the prior below is used, and the caller is told
so.

Groups of fields:

- **per GPU kind** (fitted per GPU): ``matmul_efficiency``, ``moe_matmul_efficiency``,
  ``attention_efficiency`` (shared by the GPUs of one generation: the same SM and kernels, so
  Hopper's H100 and H200, Blackwell's B200, GB200 and B300), ``fp4_matmul_ratio`` (shared by one
  architecture: B300's FP4 peak is its own), ``weight_bandwidth_efficiency``,
  ``collective_latency_s``;
- **per engine** (fitted per backend): ``overhead_scale`` multiplies every fixed per-step and
  per-layer overhead, ``compute_scale`` multiplies the achieved FLOP/s of every kernel class, and
  ``request_latency_s`` is the engine front end's fixed latency per request (HTTP, tokenizer,
  first detokenize), ``burst_share`` is the share of a closed-loop benchmark's waves that
  reach the engine together (1: the lanes stay in lock step, as under SGLang's prefill-first
  schedule; small: they drift apart, as when prefill chunks ride in decode steps),
  ``burst_jitter_steps`` is the spread, in engine steps, that jitter gives a wave's arrivals: a
  wave whose prompts fill k steps keeps ``burst_share`` × k / (k + jitter) of its lock step
  (``replay.lock_step_weight``; a wave of many steps' prompts queues as in lock step whatever the
  jitter, one of a fraction of a step is spread by it), and
  ``first_token_steps`` is the engine's pipeline lag in steps between a request and its first
  token at the client (a request arriving while a step runs waits for it, and under asynchronous
  scheduling for the next one too, already built; a sampled token is handed to the front end
  while the next step runs);
- **global** (fitted once): the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from tokenmill.errors import TokenmillError


@dataclass(frozen=True)
class PerfParams:
    # --- achievable fraction of peak, by kernel class ------------------------------------------
    matmul_efficiency: float = 0.55  # dense GEMMs (attention projections, dense MLP, shared experts, lm_head)
    moe_matmul_efficiency: float = 0.45  # grouped expert GEMMs
    fp8_matmul_ratio: float = 0.85  # an 8-bit GEMM reaches this × the fraction of its (higher) peak
    fp4_matmul_ratio: float = 0.7  # a 4-bit GEMM likewise (block scales, shorter K loops)
    attention_efficiency: float = 0.40  # attention and linear-attention kernels (FLOP-bound part)
    weight_bandwidth_efficiency: float = 0.75  # streaming weights from HBM
    cache_bandwidth_efficiency: float = 0.60  # reading KV pages / reading and writing linear-attention state
    # HBM passes over the expert inputs of each token-expert assignment an MoE layer makes around
    # its GEMMs: the permutation into expert order (read, write), the 8-bit quantisation of the
    # inputs (read, write), the weighted combine of the outputs (read). Prior 4 (of those five,
    # some fused); at the weight-streaming efficiency.
    moe_activation_passes: float = 4.0
    # --- communication ---------------------------------------------------------------------------
    collective_bandwidth_efficiency: float = 0.70  # of the scale-up (NVLink) bandwidth per direction
    collective_latency_s: float = 8e-6  # one collective inside a scale-up (NVLink) domain
    network_latency_s: float = 25e-6  # one collective (or pipeline hop) that crosses nodes over the NIC
    network_bandwidth_efficiency: float = 0.70  # of the NIC bandwidth per GPU
    kv_transfer_latency_s: float = 2e-3  # disaggregated serving: handing one request's KV to a decode worker
    # --- fixed overheads -------------------------------------------------------------------------
    step_overhead_s: float = 1.5e-3  # CPU scheduling + launch per engine step (overlaps the GPU)
    prefill_layer_overhead_s: float = 30e-6  # per layer of a step that runs prefill (no CUDA graph)
    decode_layer_overhead_s: float = 8e-6  # per layer of a pure decode step (CUDA graph gaps)
    moe_layer_overhead_s: float = 5e-6  # per MoE layer of a step: router, top-k, permute, combine kernels
    sampling_per_token_s: float = 2e-6  # logits processing and sampling per produced token
    draft_step_overhead_s: float = 0.6e-3  # drafter launch per speculative step
    request_latency_s: float = 20e-3  # per request, outside the GPU: HTTP, tokenizer, first detokenize (per engine)
    # The server front end's host time per streamed token (detokenize, SSE chunk, socket write) where
    # it shares the engine's interpreter: CPU-side work of the step, like step_overhead_s (tokenmill's
    # own server; measured by `calibrate local`). 0 where a separate process detokenizes (SGLang,
    # vLLM, TRT-LLM).
    stream_per_token_s: float = 0.0
    # How much of the device's work the CPU side of a step hides: 1 on a GPU (the CPU schedules the
    # next step while the GPU runs this one: step = max(GPU work, CPU work)); 0 on a CPU device,
    # where the same cores do both (step = GPU work + CPU work).
    cpu_overlap: float = 1.0
    # Rows M at which a dense GEMM reaches half its large-M efficiency (efficiency × M / (M + M½)):
    # small products run far below peak on a CPU (decode at 1–64 rows against prefill at 2,048).
    # 0 = flat, what the GPU fits use (their small-M regime is the weight-streaming roofline).
    gemm_half_rows: float = 0.0
    # Per sequence with a prefill chunk in a step: its own attention and state kernels, the padding
    # of its last linear-attention chunk, its bookkeeping. Fitted on a CPU (`calibrate local`), where
    # 64 prompts of 32 tokens cost more than 16 of 128; 0 in the GPU fits.
    prefill_seq_overhead_s: float = 0.0
    # 1: the engine pads the prefill chunks of a step to the longest one for attention and linear
    # attention (tokenmill's engine: one [sequences, longest] table); 0: variable-length kernels
    # (SGLang, vLLM, TRT-LLM), what the GPU fits use.
    padded_prefill: float = 0.0
    # Per step of the chunked linear-attention scan, per layer: the chunks of a prompt are carried
    # through the state one after another, so a step's prefill pays its longest chunk's number of
    # 64-token chunks in sequence (two small batched products each), however many prompts ride
    # along. On a CPU (`calibrate local`) one 2,000-token prompt costs more than sixteen of 128 for
    # that reason; 0 in the GPU fits (a fused kernel hides it).
    linear_chunk_step_s: float = 0.0
    # The front end's serial time per request (read, parse and validate the body, admit), where one
    # event loop does it for all clients: requests sent together reach the scheduler one after
    # another (the simulator queues them). Measured by `calibrate local`; 0 elsewhere (the replay's
    # `request_latency_s` covers the engines' front ends as a latency, not a queue).
    front_end_per_request_s: float = 0.0
    # --- engine multipliers ----------------------------------------------------------------------
    overhead_scale: float = 1.0  # multiplies every fixed overhead above (engine's host efficiency)
    compute_scale: float = 1.0  # multiplies achieved FLOP/s of every kernel class (engine's kernels)
    burst_share: float = 0.5  # share of a closed-loop benchmark's waves that reach the engine at once
    # The spread, in engine steps, that jitter (the client's, the front end's) gives the arrivals of
    # a wave. A wave whose prompts fill k steps of prefill keeps burst_share × k / (k + this) of its
    # lock step: its own prefill queue outlasts a short spread, a wave of a few prompts is spread
    # out by it (replay.lock_step_weight). Prior: one step.
    burst_jitter_steps: float = 1.0
    # Engine steps a first token reaches the client later than the replay's step sequence says: the
    # step in flight when the request arrives (the replay admits a closed loop's request at the
    # boundary where the last one finished), the one already built under asynchronous scheduling,
    # and output handed to the front end during the next step. Times a mean step as a decoding
    # request sees it: the point's TPOT × the tokens a step yields (replay.step_lag). Prior: one step.
    first_token_steps: float = 1.0

    def to_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}

    def updated(self, **changes: Any) -> PerfParams:
        return replace(self, **changes)


#: Fields fitted per GPU kind, per engine, and once for all (see the module docstring).
GPU_FIELDS: tuple[str, ...] = (
    "matmul_efficiency",
    "moe_matmul_efficiency",
    "fp4_matmul_ratio",
    "attention_efficiency",
    "weight_bandwidth_efficiency",
    "collective_latency_s",
)
#: Of ``GPU_FIELDS``, the kernel efficiencies shared by the GPUs of one generation
#: (``calibrate._family``): the same SM, the same 16- and 8-bit tensor cores and the same GEMM,
#: grouped-GEMM and attention kernels. H100 and H200
#: (Hopper); B200, GB200 and B300 (Blackwell; Blackwell Ultra is the Blackwell SM with more FP4
#: throughput and a faster exponent unit, and the same 16- and 8-bit peaks).
FAMILY_TIED = ("matmul_efficiency", "moe_matmul_efficiency", "attention_efficiency")
#: Shared by the GPUs of one architecture (same die): the 4-bit GEMM ratio, since Blackwell Ultra's
#: FP4 peak is 1.5 × Blackwell's and how much of it the kernels reach is its own.
ARCH_TIED = ("fp4_matmul_ratio",)
#: Shared by the GPUs of one scale-up fabric (``calibrate._fabric``: the GPUs of an NVLink domain
#: and a link's bandwidth): what one collective costs is the switch's and the links', not the die's
#: or its memory's. HGX H100 and HGX H200 (8 GPUs through NVSwitch, NVLink 4, 450 GB/s a way), HGX
#: B200 and HGX B300 (8 GPUs, NVLink 5, 900 GB/s); GB200's 72-GPU rack is a fabric of its own.
#: Fitted per GPU, H200's came to 20.7 µs against H100's 16.4 and B300's to 18.7 against B200's
#: 16.6, and H200 decoded an MoE model slower than H100 at one request (docs/perf.md §3, "One
#: fabric, one collective latency").
FABRIC_TIED = ("collective_latency_s",)
#: Of ``GPU_FIELDS``, those fitted for a GPU's own memory system and interconnect rather than its
#: die: for each GPU alone (H100's HBM3 and H200's HBM3e differ though their dies do not), or for
#: the GPUs of one fabric (``FABRIC_TIED``). Each is pulled towards the other GPUs' values
#: (``calibrate.POOL_WEIGHT``), and a GPU the table does not name takes the fitted GPUs' median.
PER_GPU_FIELDS: tuple[str, ...] = tuple(f for f in GPU_FIELDS if f not in FAMILY_TIED + ARCH_TIED)
ENGINE_FIELDS: tuple[str, ...] = (
    "overhead_scale",
    "compute_scale",
    "request_latency_s",
    "burst_share",
    "burst_jitter_steps",
    "first_token_steps",
)
GLOBAL_FIELDS: tuple[str, ...] = (
    "fp8_matmul_ratio",
    "decode_layer_overhead_s",
    "cache_bandwidth_efficiency",
    "collective_bandwidth_efficiency",
    "network_latency_s",
    "network_bandwidth_efficiency",
    "kv_transfer_latency_s",
    "step_overhead_s",
    "prefill_layer_overhead_s",
    "moe_layer_overhead_s",
    "moe_activation_passes",
)

#: Physical bounds each fitted field stays inside.
BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency": (0.15, 0.95),
    "moe_matmul_efficiency": (0.08, 0.95),
    "attention_efficiency": (0.1, 0.95),
    "weight_bandwidth_efficiency": (0.3, 0.98),
    "fp8_matmul_ratio": (0.2, 1.5),
    "fp4_matmul_ratio": (0.1, 1.5),
    "cache_bandwidth_efficiency": (0.1, 0.98),
    "collective_bandwidth_efficiency": (0.05, 0.98),
    "collective_latency_s": (1e-6, 150e-6),
    "network_latency_s": (3e-6, 500e-6),
    "network_bandwidth_efficiency": (0.05, 0.98),
    "kv_transfer_latency_s": (1e-5, 0.2),
    "step_overhead_s": (1e-4, 20e-3),
    "prefill_layer_overhead_s": (1e-6, 500e-6),
    "decode_layer_overhead_s": (1e-6, 200e-6),
    "moe_layer_overhead_s": (1e-7, 100e-6),
    "moe_activation_passes": (0.05, 40.0),
    "request_latency_s": (1e-4, 0.2),
    "overhead_scale": (0.2, 5.0),
    "compute_scale": (0.3, 3.0),
    "burst_share": (0.02, 1.0),
    "burst_jitter_steps": (0.01, 1000.0),
    "first_token_steps": (0.05, 12.0),
}

#: Fields without fitted bounds that are fractions (the rest of them must be ≥ 0).
_UNIT_FIELDS = ("cpu_overlap", "padded_prefill")


def override(params: PerfParams, items: list[str], flag: str = "--set") -> tuple[PerfParams, str]:
    """``params`` with each ``KEY=VALUE`` of ``items`` set: a what-if on the constants (a build with
    faster all-reduces, a leaner scheduler) after the fitted ones are resolved. A key must be a
    ``PerfParams`` field and a value a finite number inside the field's physical ``BOUNDS`` (a
    fraction for ``cpu_overlap`` and ``padded_prefill``, ≥ 0 for the rest): a value in the wrong
    unit (5 for 5 µs) is refused, not predicted. Returns the new constants and the note that says
    so, each change in it (``… collective_latency_s 1.87e-05 → 5e-06``)."""
    names = [f.name for f in fields(PerfParams)]
    changes: dict[str, float] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise TokenmillError(f"{flag} takes KEY=VALUE with KEY one of {', '.join(names)} (got {item!r})")
        try:
            value = float(text)
        except ValueError:
            raise TokenmillError(f"{flag} {key}: {text!r} is not a number") from None
        lo, hi = BOUNDS.get(key, (0.0, 1.0) if key in _UNIT_FIELDS else (0.0, float("inf")))
        if not (math.isfinite(value) and lo <= value <= hi):
            raise TokenmillError(f"{flag} {key} must be between {lo:g} and {hi:g} (got {text.strip()})")
        changes[key] = value
    lines = [f"{k} {getattr(params, k):.4g} → {v:.4g}" for k, v in changes.items()]
    return params.updated(**changes), f"constants set by {flag}, a what-if the fit did not make: {'; '.join(lines)}"
