"""Fit the cost model's constants to engine steps timed on this machine (``tokenmill calibrate local``).

The GPU fit (``calibrate.fit``) sees only end-to-end benchmark rows; here every step is measured,
so the fit is direct: the cost model turns each timed step's batch into resource demands
(``CostModel.features``, with the machine's measured FLOP/s and bandwidth as the "GPU"), and
cyclic coordinate descent in log space (golden section per constant) finds the efficiencies and
overheads that minimise the squared log error of the step times. Each size class of step (prefill
steps by powers of two of their tokens and of their sequences, decode steps by powers of two of
their requests) weighs the same, so the many decode steps and full prefill chunks of a grid do not
drown the short prefills that set the TTFT of light load, nor one long prompt the many short ones
that arrive together under load.

The fitted constants are the same physical quantities as on a GPU (achieved fraction of the
measured GEMM rate and memory bandwidth by kernel class, per-layer launch gaps, per-token
sampling cost), with wider bounds: a tiny model on a CPU reaches a few percent of a large
GEMM's rate and pays tens of microseconds per operator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.perf.batch import BatchShape
from tokenmill.perf.optimize import golden_section
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import STEP_KEYS, CostModel, Features, combine
from tokenmill.plan.layout import Layout
from tokenmill.spec import ModelSpec

#: Constants fitted on a local machine, with their bounds (log-space search inside them).
LOCAL_BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency": (1e-3, 1.0),
    "moe_matmul_efficiency": (1e-3, 1.0),
    "attention_efficiency": (1e-3, 1.0),
    "weight_bandwidth_efficiency": (1e-2, 1.0),
    "cache_bandwidth_efficiency": (1e-3, 1.0),
    "step_overhead_s": (1e-6, 0.1),
    "prefill_layer_overhead_s": (1e-7, 0.02),
    "decode_layer_overhead_s": (1e-7, 0.02),
    "sampling_per_token_s": (1e-8, 0.01),
    "gemm_half_rows": (0.5, 4096.0),
    "prefill_seq_overhead_s": (1e-7, 0.02),
    "linear_chunk_step_s": (1e-8, 0.01),
}

SWEEPS = 40
GOLDEN_ITERS = 30


@dataclass(frozen=True)
class LocalFit:
    """The fitted constants and how well they reproduce the timed steps."""

    params: PerfParams
    fitted: dict[str, float]
    steps: int
    prefill_steps: int
    median_abs_pct_error: float
    p90_abs_pct_error: float
    total_time_error_pct: float  # predicted total ÷ measured total − 1, in percent
    predicted_s: tuple[float, ...]  # per usable step, in input order (empty and zero-time steps dropped)
    class_bias: dict[tuple[str, int, int], float]  # median measured ÷ predicted per size class (size_class)


def _stack(features: Sequence[Features]) -> Features:
    return Features(*(np.asarray(col, dtype=np.float64) for col in zip(*features, strict=True)))


def size_class(shape: BatchShape) -> tuple[str, int, int]:
    """Steps of one kind and one size: prefill steps by powers of two of their prefill tokens and of
    their prefilling sequences (one prompt of 2,048 tokens and sixteen of 128 are different work:
    a long scan against many short ones), decode steps by powers of two of their requests."""
    if shape.prefill:
        return ("prefill", max(0, shape.prefill_tokens - 1).bit_length(), max(0, len(shape.prefill) - 1).bit_length())
    return ("decode", max(0, len(shape.decode) - 1).bit_length(), 0)


def _balanced_weights(shapes: Sequence[BatchShape]) -> np.ndarray:
    """Every size class weighs the same in the loss, however many steps it has: a grid yields
    hundreds of decode steps and full prefill chunks but few short prefills, and those set the
    TTFT of light load."""
    classes = [size_class(s) for s in shapes]
    counts: dict[tuple[str, int, int], int] = {}
    for c in classes:
        counts[c] = counts.get(c, 0) + 1
    w = np.array([1.0 / counts[c] for c in classes])
    normalised: np.ndarray = w / w.sum()
    return normalised


def _predict(f: Features, values: dict[str, float], base: PerfParams) -> np.ndarray:
    ns = SimpleNamespace(**(base.to_dict() | values))
    parts = combine(f, ns, mx=np.maximum)
    total: np.ndarray = sum((parts[k] for k in STEP_KEYS), np.zeros_like(f.steps))
    return total


def fit_local(
    model: ModelSpec,
    machine: GPU,
    layout: Layout,
    steps: Sequence[tuple[BatchShape, float]],
    base: PerfParams | None = None,
) -> LocalFit:
    """Fit ``LOCAL_BOUNDS``' constants to ``steps`` (batch shape, measured seconds)."""
    usable = [(s, t) for s, t in steps if not s.is_empty and t > 0]
    if len(usable) < len(LOCAL_BOUNDS):
        raise TokenmillError(f"need at least {len(LOCAL_BOUNDS)} timed steps to fit, got {len(usable)}")
    # A CPU runs the model and the scheduler on the same cores: nothing overlaps. tokenmill's engine
    # pads a step's prefill chunks to the longest. An MoE layer's routing ops are among the
    # per-layer gaps the fit measures here, not a GPU engine's kernels of their own, and its
    # gather and scatter of the experts' tokens are in the fitted kernel rates, not in HBM passes.
    base = base or PerfParams(cpu_overlap=0.0, padded_prefill=1.0, moe_layer_overhead_s=0.0, moe_activation_passes=0.0)
    cost = CostModel(model, machine, layout, base)
    feats = _stack([cost.features(s) for s, _ in usable])
    measured = np.array([t for _, t in usable])
    n_pre = sum(1 for s, _ in usable if s.prefill)
    weights = _balanced_weights([s for s, _ in usable])
    log_meas = np.log(measured)

    values = {k: float(getattr(base, k)) for k in LOCAL_BOUNDS}
    for k, (lo, hi) in LOCAL_BOUNDS.items():
        values[k] = min(max(values[k], lo), hi)

    def loss(vals: dict[str, float]) -> float:
        pred = _predict(feats, vals, base)
        return float(np.sum(weights * (np.log(pred) - log_meas) ** 2))

    for _ in range(SWEEPS):
        for key, (lo, hi) in LOCAL_BOUNDS.items():

            def objective(logv: float, key: str = key) -> float:
                return loss(values | {key: math.exp(logv)})

            best_log, best = golden_section(objective, math.log(lo), math.log(hi), GOLDEN_ITERS)
            if best < loss(values):
                values[key] = math.exp(best_log)

    pred = _predict(feats, values, base)
    ape = np.abs(pred / measured - 1.0) * 100.0
    ratios: dict[tuple[str, int, int], list[float]] = {}
    for (shape, _), r in zip(usable, measured / pred, strict=True):
        ratios.setdefault(size_class(shape), []).append(float(r))
    return LocalFit(
        params=base.updated(**values),
        fitted=dict(values),
        steps=len(usable),
        prefill_steps=n_pre,
        median_abs_pct_error=float(np.median(ape)),
        p90_abs_pct_error=float(np.percentile(ape, 90)),
        total_time_error_pct=float((pred.sum() / measured.sum() - 1.0) * 100.0),
        predicted_s=tuple(float(x) for x in pred),
        class_bias={k: float(np.median(v)) for k, v in ratios.items()},
    )
