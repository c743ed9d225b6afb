"""Fit the performance model's constants to measured benchmark rows.

Rows are predicted by ``perf.row_prediction`` (``predict_rows``) and scored by ``perf.scoring``;
this module records those replays and refits their constants:

- :func:`fit` fits the constants: replay each fully specified row once with the current constants,
  recording every step's resource demands and its weight in the row's mean TTFT and TPOT; then
  minimise the robust sum over rows of |log(predicted / measured)| (smoothed near 0) for TTFT and
  TPOT, each row weighed by 1 / the rows that report its measurement (``measurement_weights``),
  by cyclic coordinate descent in log space, one constant at a time (a 7-point grid around the
  current value, then golden-section search inside the best bracket, inside each constant's
  physical bounds). A constant of one GPU kind or one engine is scored on that GPU's or engine's
  rows only; then each engine version with rows enough gets its own engine constants, as factors
  on its engine's (``_fit_versions``). Replay and fit alternate ``rounds`` times (the replay's
  step sequence hardly moves with the constants; the second round absorbs what does).
  Deterministic: rows are processed in a fixed order and the optimiser has no randomness.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf.calibrated import ParamTable, version_key
from tokenmill.perf.optimize import golden_section
from tokenmill.perf.params import (
    ARCH_TIED,
    BOUNDS,
    ENGINE_FIELDS,
    FABRIC_TIED,
    FAMILY_TIED,
    GLOBAL_FIELDS,
    GPU_FIELDS,
    PER_GPU_FIELDS,
    PerfParams,
)
from tokenmill.perf.replay import lock_step_fraction
from tokenmill.perf.roofline import Features, combine, total_seconds
from tokenmill.perf.row_prediction import Progress, RowPrediction, fitting_rows, predict_rows


@dataclass
class _Subset:
    feats: Features
    rows: np.ndarray  # row index (local) per sub-row
    tw: np.ndarray
    pw: np.ndarray
    sync: np.ndarray
    gpu: np.ndarray  # GPU index per sub-row
    eng: np.ndarray  # engine index per sub-row
    ver: np.ndarray  # engine-version index per sub-row (-1: the engine's constants)
    steps: np.ndarray  # the steps one wave's prompts fill, per sub-row (its row's)
    meas_ttft: np.ndarray
    meas_tpot: np.ndarray
    n_rows: int
    weight: np.ndarray  # per row: 1 / the rows that report its measurement (``measurement_weights``)


@dataclass
class FitData:
    """Recorded demands of the fit rows, with their GPU, engine and measurements."""

    gpus: list[str]
    engines: list[str]
    ids: list[str]
    features: np.ndarray
    row: np.ndarray
    tw: np.ndarray
    pw: np.ndarray
    sync: np.ndarray
    row_gpu: np.ndarray
    row_eng: np.ndarray
    meas_ttft: np.ndarray  # seconds
    meas_tpot: np.ndarray
    versions: list[str] = field(default_factory=list)  # "engine@version" with constants of its own
    row_ver: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # index or -1
    row_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # Recorded.prompt_steps per row
    row_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))  # measurement_weights; empty: all 1

    def weights(self) -> np.ndarray:
        """Each row's weight in the loss (1 where none was recorded)."""
        return self.row_weight if len(self.row_weight) == len(self.ids) else np.ones(len(self.ids))

    def subset(self, rows_mask: np.ndarray) -> _Subset:
        keep_rows = np.flatnonzero(rows_mask)
        remap = -np.ones(len(rows_mask), dtype=np.int64)
        remap[keep_rows] = np.arange(len(keep_rows))
        sub = remap[self.row] >= 0
        f = np.asfortranarray(self.features[sub])  # contiguous columns: the fit works column-wise
        r = remap[self.row[sub]]
        return _Subset(
            Features(*(f[:, j] for j in range(f.shape[1]))),
            r,
            self.tw[sub],
            self.pw[sub],
            self.sync[sub],
            self.row_gpu[self.row[sub]],
            self.row_eng[self.row[sub]],
            self.row_ver[self.row[sub]],
            self.row_steps[self.row[sub]],
            self.meas_ttft[keep_rows],
            self.meas_tpot[keep_rows],
            len(keep_rows),
            self.weights()[keep_rows],
        )

    def without(self, keep: np.ndarray) -> FitData:
        """The same data restricted to rows where ``keep`` is true."""
        idx = np.flatnonzero(keep)
        remap = -np.ones(len(keep), dtype=np.int64)
        remap[idx] = np.arange(len(idx))
        sub = remap[self.row] >= 0
        return FitData(
            self.gpus,
            self.engines,
            [self.ids[i] for i in idx],
            self.features[sub],
            remap[self.row[sub]],
            self.tw[sub],
            self.pw[sub],
            self.sync[sub],
            self.row_gpu[idx],
            self.row_eng[idx],
            self.meas_ttft[idx],
            self.meas_tpot[idx],
            self.versions,
            self.row_ver[idx],
            self.row_steps[idx],
            self.weights()[idx],
        )


#: An engine version gets constants of its own when the fit has at least this many of its rows.
MIN_VERSION_ROWS = 20


def measurement_weights(keys: Sequence[Hashable]) -> np.ndarray:
    """1 / (the rows sharing a key) for each row: one measurement counts once in the fit, however
    many rows report it.

    In the calibration file 454 of the 3,181 fully specified rows repeat another row's
    measurement: the same benchmark point copied into two source files, or filed under both
    DeepSeek-R1 and DeepSeek-V3 (one architecture), down to the last digit of both results.
    Counted per row, those campaigns (131 extra rows of SGLang on B200 alone, a quarter of SGLang's)
    pull the constants as if they had been measured two or three times (docs/perf.md §3)."""
    counts = Counter(keys)
    return np.array([1.0 / counts[k] for k in keys])


def collect(preds: Iterable[RowPrediction], versions: bool = False, dedupe: bool = True) -> FitData:
    """Fit data from recorded predictions (rows without a recording or measurement are left out).
    With ``versions``, rows of an engine version with ``MIN_VERSION_ROWS`` or more rows are marked
    with it, and the fit gives that version engine constants of its own. With ``dedupe`` (the
    default), rows that report one measurement (the same engine, system and both results) share
    one row's weight in the loss (``measurement_weights``)."""
    gpus: list[str] = []
    engines: list[str] = []
    feats: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    tws: list[np.ndarray] = []
    pws: list[np.ndarray] = []
    syncs: list[np.ndarray] = []
    row_gpu: list[int] = []
    row_eng: list[int] = []
    row_ver_key: list[str] = []
    row_steps: list[float] = []
    mt: list[float] = []
    mp: list[float] = []
    ids: list[str] = []
    same: list[Hashable] = []
    skipped: Counter[str] = Counter()  # why rows were left out, said when none is left
    for p in preds:
        rec = p.recorded
        if rec is None or not p.measured_ttft_ms or not p.measured_tpot_ms or not p.fully_specified:
            skipped[p.skipped_reason or "no measured TTFT and TPOT"] += 1
            continue
        g = load_gpu(p.system).name
        if g not in gpus:
            gpus.append(g)
        if p.backend not in engines:
            engines.append(p.backend)
        i = len(ids)
        ids.append(p.id)
        feats.append(rec.features)
        rows.append(np.full(len(rec.ttft_w), i, dtype=np.int64))
        tws.append(rec.ttft_w)
        pws.append(rec.tpot_w)
        syncs.append(rec.sync)
        row_gpu.append(gpus.index(g))
        row_eng.append(engines.index(p.backend))
        row_ver_key.append(version_key(p.backend, p.version) if p.version else "")
        row_steps.append(rec.prompt_steps)
        mt.append(p.measured_ttft_ms / 1e3)
        mp.append(p.measured_tpot_ms / 1e3)
        same.append((p.backend, p.system, p.measured_ttft_ms, p.measured_tpot_ms) if dedupe else p.id)
    if not ids:
        why = "; ".join(f"{n} × {reason}" for reason, n in skipped.most_common(3))
        raise TokenmillError(
            "no row could be replayed with measurements: nothing to fit" + (f" ({why})" if why else "")
        )
    counts: dict[str, int] = {}
    for key in row_ver_key:
        if key:
            counts[key] = counts.get(key, 0) + 1
    fitted = sorted(k for k, n in counts.items() if n >= MIN_VERSION_ROWS) if versions else []
    row_ver = np.asarray([fitted.index(k) if k in fitted else -1 for k in row_ver_key], dtype=np.int64)
    return FitData(
        gpus,
        engines,
        ids,
        np.vstack(feats),
        np.concatenate(rows),
        np.concatenate(tws),
        np.concatenate(pws),
        np.concatenate(syncs),
        np.asarray(row_gpu),
        np.asarray(row_eng),
        np.asarray(mt),
        np.asarray(mp),
        fitted,
        row_ver,
        np.asarray(row_steps, dtype=float),
        measurement_weights(same),
    )


_DELTA = 0.02  # smoothing of |log error| near zero


def _loss(pred_t: np.ndarray, pred_p: np.ndarray, s: _Subset) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        et = np.log(np.maximum(pred_t, 1e-9) / s.meas_ttft)
        ep = np.log(np.maximum(pred_p, 1e-9) / s.meas_tpot)
    return float(np.sum(s.weight * (np.sqrt(et * et + _DELTA**2) + np.sqrt(ep * ep + _DELTA**2))))


class _Params:
    """Current constants as arrays over GPUs and engines, and their numpy view for a subset."""

    def __init__(self, table: ParamTable, data: FitData) -> None:
        prior = PerfParams()
        self.glob = {k: table.global_.get(k, getattr(prior, k)) for k in _all_fields()}
        # a GPU the table does not name starts where ``predict`` puts it (a sibling's die, the
        # fitted GPUs' medians), not at the priors
        start = {g: table.gpu_values(g) for g in data.gpus}
        self.gpu = {k: np.array([start[g].get(k, self.glob[k]) for g in data.gpus]) for k in GPU_FIELDS}
        self.eng = {
            k: np.array([table.backends.get(e, {}).get(k, getattr(prior, k)) for e in data.engines])
            for k in ENGINE_FIELDS
        }
        # An engine version's constants are its engine's times a factor (1 until fitted; the last
        # slot is the factor of rows without a fitted version, index -1, and stays 1).
        self.ver_eng = [data.engines.index(v.split("@", 1)[0]) for v in data.versions]
        self.fac = {
            k: np.array(
                [
                    table.versions.get(v, {}).get(k, self.eng[k][e]) / self.eng[k][e]
                    for v, e in zip(data.versions, self.ver_eng, strict=True)
                ]
                + [1.0]
            )
            for k in ENGINE_FIELDS
        }

    def engine_values(self, key: str, s: _Subset) -> np.ndarray:
        """An engine constant for every sub-row of ``s``: its engine's value times its version's
        factor, inside the constant's bounds (a share stays a share)."""
        lo, hi = BOUNDS[key]
        out: np.ndarray = np.clip(self.eng[key][s.eng] * self.fac[key][s.ver], lo, hi)
        return out

    def version_value(self, key: str, i: int) -> float:
        lo, hi = BOUNDS[key]
        return float(np.clip(self.eng[key][self.ver_eng[i]] * self.fac[key][i], lo, hi))

    def view(self, s: _Subset) -> SimpleNamespace:
        """The constants of every sub-row of ``s``: its GPU's, its engine's, its version's."""
        ns = SimpleNamespace(**self.glob)
        for k, v in self.gpu.items():
            setattr(ns, k, v[s.gpu])
        for k in self.eng:
            setattr(ns, k, self.engine_values(k, s))
        return ns

    def table(self, data: FitData, meta: dict[str, Any]) -> ParamTable:
        """The constants as a table. A GPU or engine without rows in ``data`` (a refit that leaves
        it out: ``FitData.without``) is not written: nothing fitted its constants, and a prediction
        for it falls back as for any GPU or engine the table does not name (``ParamTable.resolve``:
        a GPU of the same architecture, else the priors)."""
        gpus_seen, engines_seen = set(data.row_gpu.tolist()), set(data.row_eng.tolist())
        return ParamTable(
            global_={k: float(self.glob[k]) for k in GLOBAL_FIELDS},
            gpus={g: {k: float(self.gpu[k][i]) for k in GPU_FIELDS} for i, g in enumerate(data.gpus) if i in gpus_seen},
            backends={
                e: {k: float(self.eng[k][i]) for k in ENGINE_FIELDS}
                for i, e in enumerate(data.engines)
                if i in engines_seen
            },
            meta=meta,
            versions={v: {k: self.version_value(k, i) for k in ENGINE_FIELDS} for i, v in enumerate(data.versions)},
        )


def _all_fields() -> list[str]:
    from dataclasses import fields

    return [f.name for f in fields(PerfParams)]


def _predict(s: _Subset, ns: SimpleNamespace) -> tuple[np.ndarray, np.ndarray]:
    """Mean TTFT and TPOT of every row of ``s``: its recorded steps re-costed and weighed, and
    the engine's step lag (``replay.step_lag``: ``first_token_steps`` × the row's TPOT) added to
    its TTFT; a row's sub-rows share one engine, so Σ (tw + k·pw)·t is its TTFT + k × its TPOT."""
    b = ns.burst_share * lock_step_fraction(s.steps, ns.burst_jitter_steps)  # replay.lock_step_weight
    t = total_seconds(combine(s.feats, ns, np.maximum))
    t = t * np.where(s.sync == 1, b, np.where(s.sync == 0, 1.0 - b, 1.0))
    return (
        np.bincount(s.rows, weights=(s.tw + ns.first_token_steps * s.pw) * t, minlength=s.n_rows),
        np.bincount(s.rows, weights=s.pw * t, minlength=s.n_rows),
    )


def predict_recorded(data: FitData, table: ParamTable, rows_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean TTFT and TPOT (seconds) of the masked rows from their recorded steps under ``table``:
    what a replay with those constants gives, without replaying (the step sequence of a closed
    loop does not depend on the step times; the disaggregated rows' decode batch is the recorded
    one)."""
    s = data.subset(rows_mask)
    return _predict(s, _Params(table, data).view(s))


@dataclass
class FitReport:
    loss_before: float
    loss_after: float
    rows: int
    sweeps: int
    history: list[float]
    #: ``fit(score=True)``: the fitted rows replayed with the constants the fit started from and
    #: with the ones it ends with (the same rows, in order): what the refit changed on its own
    #: rows, in sample
    start_predictions: list[RowPrediction] = field(default_factory=list)
    fitted_predictions: list[RowPrediction] = field(default_factory=list)


#: Weight of the pull towards the priors, per row (its measurement weight) a constant is scored on:
#: (log(value / prior))².
PRIOR_WEIGHT = 0.02
#: Two constants published GEMM benchmarks pin: large BF16 GEMMs reach 70–80 % of dense peak on
#: H100 and B200, 8-bit ones about 0.9 × that fraction of their own peak. The fit pulls them
#: towards these values (not ``PerfParams``' defaults, the uncalibrated roofline that ``simulate``
#: without ``--backend`` uses) with ten times the weight: the file has
#: few dense models, and without the one dense 70B model a refit let Blackwell's dense GEMMs fall to
#: 0.42 of peak and the 8-bit ratio to 0.71, absorbing what the MoE rows miss elsewhere, and that
#: model's held-out TTFT error doubled (docs/perf.md §3, §5).
#: The engines' front-end latency (``request_latency_s``: HTTP, tokenizer, first detokenize, a CPU
#: cost of tens of milliseconds) gets the same weight towards its prior (20 ms): the file cannot
#: tell it from the other fixed costs of a first token. Without gpt-oss-120b's rows, whose whole
#: first token takes ~40 ms on B200, a refit moved TRT-LLM's from 27 to 55 ms, and that model's
#: held-out TTFT error went from 23 % to 41 %; with the front end pinned at its in-sample value the
#: same refit gave 31 % (docs/perf.md §3, "The front end's prior").
BENCHMARK_PRIORS: dict[str, float] = {"matmul_efficiency": 0.75, "fp8_matmul_ratio": 0.9}
#: Weight of the pull of a constant fitted for a GPU's memory and links (``PER_GPU_FIELDS``: HBM
#: streaming per GPU, NVLink collective latency per fabric) towards the geometric mean of the other
#: fitted GPUs' values, in the loss's units per (log ratio)², whatever the GPU's own rows (as ~100
#: rows' worth of the prior pull would be): partial pooling. A GPU's memory system and links differ
#: from its siblings', and the rows say by how much where many campaigns agree; where one or two
#: campaigns are all a GPU has, they cannot move it to a bound on their own. Without DeepSeek's
#: rows GB200 kept 15, 13 of them one Qwen3-32B campaign under TRT-LLM, and its weight streaming
#: fell to the 0.3 bound and its collective latency rose to 97 µs; DeepSeek's 87 GB200 rows, held
#: out, then came out twice as slow as measured (docs/perf.md §3, "The GPUs' pooled constants").
POOL_WEIGHT = 2.0
PRIOR_WEIGHTS: dict[str, float] = dict.fromkeys(
    ("matmul_efficiency", "fp8_matmul_ratio", "request_latency_s"), 10 * PRIOR_WEIGHT
)
#: The lanes' jitter (``burst_jitter_steps``, prior one step) gets a tenth of the usual pull: no
#: benchmark measures it, and every engine has hundreds of rows with waves of a fraction of a step
#: to a hundred steps of prompts, which place it (vLLM's 4.6 steps, SGLang's and TRT-LLM's under
#: one); the pull keeps an engine with few rows near one step (docs/perf.md §3, "The lanes' jitter").
PRIOR_WEIGHTS["burst_jitter_steps"] = PRIOR_WEIGHT / 10


#: The constants that set a GEMM's or attention kernel's rate: with a ``ceiling``, their product may
#: not put a kernel of the rows a coordinate is scored on above that fraction of its dtype's peak
#: (``_Coordinate.over_peak``; ``calibrate fit --ceiling``, 0.95 with ``--start``): a few rows of one
#: deployment otherwise buy a faster prompt wherever it is cheapest, e.g. FP8 GEMMs at 1.86 × the
#: FP8 peak (docs/perf.md, "Your own deployment against the model").
COMPUTE_KEYS = frozenset(
    (
        "matmul_efficiency",
        "moe_matmul_efficiency",
        "attention_efficiency",
        "compute_scale",
        "fp8_matmul_ratio",
        "fp4_matmul_ratio",
    )
)


#: The constants that are a stream's fraction of its peak bandwidth on their own (no engine scale
#: multiplies them): with a ``ceiling`` their upper bound is the ceiling. A few rows of one
#: deployment otherwise stream weights at the 0.98 bound, above the 0.88 a device copy reaches on
#: an H200 (docs/perf.md, "The fitted constants against one H200's kernels").
BANDWIDTH_KEYS = frozenset(
    (
        "weight_bandwidth_efficiency",
        "cache_bandwidth_efficiency",
        "collective_bandwidth_efficiency",
        "network_bandwidth_efficiency",
    )
)


def fit_bounds(key: str, ceiling: float | None = None) -> tuple[float, float]:
    """Where a fit may put ``key``: its physical ``BOUNDS``, the upper one no higher than the
    ``ceiling`` for a bandwidth fraction (``BANDWIDTH_KEYS``)."""
    lo, hi = BOUNDS[key]
    return (lo, min(hi, ceiling)) if ceiling is not None and key in BANDWIDTH_KEYS else (lo, hi)


def peak_fraction(p: Any, uses8: Any = False, uses4: Any = False) -> Any:
    """The fraction of its dtype's peak the fastest kernel runs at under constants ``p`` (as
    ``roofline.combine`` composes them, at large M): a GEMM at its efficiency × the engine's compute scale ×
    the 8- or 4-bit ratio where the step runs such GEMMs (``uses8``, ``uses4``), attention at its
    efficiency × the scale. Scalars or numpy arrays (one value per step). ``calibrate fit
    --ceiling`` keeps it under a bound: above 1 no kernel could run."""
    r8 = np.where(uses8, p.fp8_matmul_ratio, 0.0)
    r4 = np.where(uses4, p.fp4_matmul_ratio, 0.0)
    gemm = np.maximum(p.matmul_efficiency, p.moe_matmul_efficiency) * np.maximum(1.0, np.maximum(r8, r4))
    return np.maximum(gemm, p.attention_efficiency) * p.compute_scale


def _log_prior(key: str) -> float:
    """Where the fit pulls ``key``: its benchmark value, else the ``PerfParams`` default."""
    return math.log(BENCHMARK_PRIORS.get(key, getattr(PerfParams(), key)))


def _arch(gpu: str) -> str:
    try:
        return load_gpu(gpu).architecture
    except TokenmillError:
        return gpu


def _family(gpu: str) -> str:
    """The GPU's generation: its architecture without the variant (``blackwell-ultra`` →
    ``blackwell``)."""
    return _arch(gpu).split("-", 1)[0]


def _fabric(gpu: str) -> str:
    """The GPU's scale-up fabric: the GPUs of its NVLink domain and a link's bandwidth
    (``8x450GB/s`` for HGX H100 and H200); an unknown GPU is its own."""
    try:
        g = load_gpu(gpu)
    except TokenmillError:
        return gpu
    return f"{g.scale_up_domain_gpus}x{g.scale_up_bandwidth_bytes_per_s / 1e9:g}GB/s"


def _tie_groups(gpus: Sequence[str], key: str) -> list[list[int]]:
    """The GPUs (indices) that share one value of a per-GPU constant: by family, by architecture,
    by scale-up fabric, or each GPU alone (``FAMILY_TIED``, ``ARCH_TIED``, ``FABRIC_TIED``)."""
    by = _family if key in FAMILY_TIED else _arch if key in ARCH_TIED else _fabric if key in FABRIC_TIED else str
    label = [by(g) for g in gpus]
    return [[i for i, x in enumerate(label) if x == lab] for lab in sorted(set(label))]


def _value(cur: _Params, scope: str, key: str, i: int, members: list[int]) -> float:
    """One constant's current value: global, of engine ``i``, of version ``i``, or of the GPUs
    ``members`` (their geometric mean)."""
    if scope == "glob":
        return float(cur.glob[key])
    if scope == "eng":
        return float(cur.eng[key][i])
    if scope == "ver":
        return cur.version_value(key, i)
    return float(np.exp(np.mean(np.log(cur.gpu[key][members]))))


class _Coordinate:
    """One constant (globally, or of one group of GPUs, or of one engine) and its line search."""

    def __init__(
        self,
        cur: _Params,
        s: _Subset,
        scope: str,
        key: str,
        i: int,
        members: list[int],
        log_prior: float,
        pooled: Sequence[int] = (),
        pull_weight: float | None = None,
        ceiling: float | None = None,
    ) -> None:
        """``pooled``: the other GPUs whose geometric mean pulls this per-GPU constant
        (``POOL_WEIGHT``); none for the rest. ``pull_weight``: the pull towards ``log_prior`` per
        row (default ``PRIOR_WEIGHTS``). ``ceiling``: a compute constant's value that puts a kernel
        of these rows above this fraction of its peak is refused (``COMPUTE_KEYS``), and a
        bandwidth fraction stays under it (``BANDWIDTH_KEYS``)."""
        self.cur, self.s, self.scope, self.key, self.i, self.members = cur, s, scope, key, i, members
        self.ceiling = ceiling if key in COMPUTE_KEYS else None
        self.bounds = fit_bounds(key, ceiling)
        if self.ceiling is not None:
            # a kernel's rate depends on the step's GPU, engine and version and on whether it runs
            # 8- or 4-bit GEMMs: one step of each such kind stands for all of them
            f = s.feats
            self.uses8 = (f.dense_flop8_s + f.moe_flop8_s) > 0
            self.uses4 = (f.dense_flop4_s + f.moe_flop4_s) > 0
            kinds = np.stack([s.gpu, s.eng, s.ver, self.uses8, self.uses4], axis=1)
            self.kinds = np.unique(kinds, axis=0, return_index=True)[1]
        self.log_prior = log_prior
        weight = PRIOR_WEIGHTS.get(key, PRIOR_WEIGHT) if pull_weight is None else pull_weight
        self.pull = weight * float(np.sum(s.weight))
        others = cur.gpu[key][list(pooled)] if pooled else None
        self.pool_centre = float(np.mean(np.log(others))) if others is not None else None
        self.ns = cur.view(s)

    def get(self) -> float:
        return _value(self.cur, self.scope, self.key, self.i, self.members)

    def put(self, v: float) -> None:
        cur, key = self.cur, self.key
        if self.scope == "glob":
            cur.glob[key] = v
        elif self.scope == "eng":
            cur.eng[key][self.i] = v
        elif self.scope == "ver":
            cur.fac[key][self.i] = v / cur.eng[key][cur.ver_eng[self.i]]
        else:
            cur.gpu[key][self.members] = v
        if self.scope == "ver" or (self.scope == "eng" and cur.ver_eng):
            # the engine's rows carry their versions' factors (without fitted versions: one value)
            setattr(self.ns, key, cur.engine_values(key, self.s))
        else:  # the subset is all rows, or one group of GPUs': one value
            setattr(self.ns, key, v)

    def over_peak(self) -> float:
        """How far the fastest kernel of the subset's steps runs above ``ceiling`` × its peak
        (0: none does; ``peak_fraction``)."""
        k = self.kinds
        # the constants on the steps in ``k`` (a per-step array indexed, one value kept)
        on_k = SimpleNamespace(
            **{
                name: v[k] if isinstance(v, np.ndarray) and v.ndim else v
                for name in COMPUTE_KEYS
                for v in (getattr(self.ns, name),)
            }
        )
        rate = peak_fraction(on_k, self.uses8[k], self.uses4[k])
        return max(0.0, float(np.max(rate)) - (self.ceiling or 0.0))

    def objective(self, logv: float) -> float:
        self.put(math.exp(logv))
        if self.ceiling is not None:
            excess = self.over_peak()
            if excess > 0:  # refused, and the further over the worse, so a start above it comes down
                return 1e12 * (1.0 + excess)
        pool = 0.0 if self.pool_centre is None else POOL_WEIGHT * (logv - self.pool_centre) ** 2
        return _loss(*_predict(self.s, self.ns), self.s) + self.pull * (logv - self.log_prior) ** 2 + pool

    def update(self, sweep: int) -> None:
        """A 7-point grid around the current value (narrowing with the sweeps), then golden-section
        search inside the best bracket; keep the current value unless the objective improves."""
        lo_b, hi_b = self.bounds
        x0 = min(max(self.get(), lo_b), hi_b)
        f0 = self.objective(math.log(x0))
        lo, hi = math.log(lo_b), math.log(hi_b)
        span = math.log(4.0) / (sweep + 1)
        grid = [min(hi, max(lo, math.log(x0) + span * (j - 3) / 3)) for j in range(7)]
        vals = [self.objective(x) for x in grid]
        j = int(np.argmin(vals))
        a, b = grid[max(0, j - 1)], grid[min(6, j + 1)]
        best_x, best_f = grid[j], vals[j]
        if b > a:
            gx, gf = golden_section(self.objective, a, b, 12)
            if gf < best_f:
                best_x, best_f = gx, gf
        if best_f > f0:
            best_x = math.log(x0)
        self.put(math.exp(best_x))


def fit_constants(
    data: FitData,
    table: ParamTable,
    sweeps: int = 4,
    fixed: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    anchor: float = 0.0,
    origin: ParamTable | None = None,
    ceiling: float | None = None,
) -> tuple[ParamTable, FitReport]:
    """Coordinate descent on the recorded demands (see the module docstring). Compute
    efficiencies are shared by the GPUs of one generation (``FAMILY_TIED``), the 4-bit ratio by
    those of one architecture (``ARCH_TIED``) and the collective latency by those of one scale-up
    fabric (``FABRIC_TIED``), each scored on its group's rows; every constant is
    pulled towards its prior (``BENCHMARK_PRIORS`` for the GEMM constants) by ``PRIOR_WEIGHT``
    (``PRIOR_WEIGHTS``) × rows (weighed) × (log(value / prior))², so a constant the data barely constrain stays
    near its documented prior. With ``anchor`` > 0 the pull is ``anchor`` × rows × (log(value /
    its value in ``origin``))² instead (``origin`` defaults to ``table``; ``fit`` passes the table
    it started from, so every round pulls towards the same constants). With ``ceiling``, no value
    of a compute constant (``COMPUTE_KEYS``) that puts a kernel of its rows above that fraction of
    its peak is taken."""
    cur = _Params(table, data)
    everything = data.subset(np.ones(len(data.ids), dtype=bool))
    by_eng = [data.subset(data.row_eng == i) for i in range(len(data.engines))]

    def total() -> float:
        return _loss(*_predict(everything, cur.view(everything)), everything)

    before = total()
    history = [before]
    # (scope, key, index, GPUs sharing the value, the rows it is scored on)
    coords: list[tuple[str, str, int, list[int], _Subset]] = []
    group_rows: dict[tuple[int, ...], _Subset] = {}  # one subset per group of GPUs, shared by fields
    for k in GPU_FIELDS:
        for members in _tie_groups(data.gpus, k):
            group = tuple(members)
            if group not in group_rows:
                group_rows[group] = data.subset(np.isin(data.row_gpu, members))
            coords.append(("gpu", k, members[0], members, group_rows[group]))
    coords += [("eng", k, i, [i], by_eng[i]) for k in ENGINE_FIELDS for i in range(len(data.engines))]
    coords += [("glob", k, 0, [0], everything) for k in GLOBAL_FIELDS]
    coords = [c for c in coords if c[1] not in fixed and c[4].n_rows > 0]
    fitted_gpus = sorted(set(data.row_gpu.tolist()))  # the GPUs with rows: each pools towards the others

    def pooled(scope: str, key: str, members: list[int]) -> list[int]:
        if scope != "gpu" or key not in PER_GPU_FIELDS:
            return []
        return [g for g in fitted_gpus if g not in members]

    # with ``anchor``, each constant is pulled towards its value in ``origin`` (default ``table``;
    # a refit of a few rows from fitted constants) instead of towards its prior, ``anchor`` per row
    centres: dict[tuple[str, str, int], float] = {}
    if anchor > 0:
        home = _Params(origin if origin is not None else table, data)
        centres = {(sc, k, i): math.log(_value(home, sc, k, i, m)) for sc, k, i, m, _ in coords}
    weight = anchor if anchor > 0 else None
    for sweep in range(sweeps):
        for scope, key, i, members, s in coords:
            centre = centres.get((scope, key, i), _log_prior(key))
            _Coordinate(cur, s, scope, key, i, members, centre, pooled(scope, key, members), weight, ceiling).update(
                sweep
            )
        history.append(total())
        if log:
            log(f"sweep {sweep + 1}: loss {history[-1]:.2f} (rows {len(data.ids)})")
    meta: dict[str, Any] = {
        "fit_rows": len(data.ids),
        "loss_before": round(before, 4),
        "loss_after": round(history[-1], 4),
    }
    if data.versions and not set(ENGINE_FIELDS) <= set(fixed):
        after = _fit_versions(data, cur, everything, sweeps, fixed, ceiling)
        meta["loss_after_versions"] = round(after, 4)
        if log:
            log(f"engine versions ({len(data.versions)}): loss {after:.2f}")
    return cur.table(data, meta), FitReport(before, history[-1], len(data.ids), sweeps, history)


def _fit_versions(
    data: FitData,
    cur: _Params,
    everything: _Subset,
    sweeps: int,
    fixed: Sequence[str] = (),
    ceiling: float | None = None,
) -> float:
    """The engine constants of each engine version with rows enough (``collect``), on its rows
    only, everything else held. A version's constant is its engine's times a factor, pulled towards
    1 (towards the engine's value, not the prior): the engine's constants describe the engine
    across its releases (and any release not fitted), a version's say how one release differs;
    the next round's fit of the GPU, engine and global constants sees the factors, so those
    constants are net of what the releases differ by. Returns the loss over ``everything``."""
    by_ver = [data.subset(data.row_ver == i) for i in range(len(data.versions))]
    for sweep in range(sweeps):
        for i, s in enumerate(by_ver):
            if s.n_rows == 0:
                continue
            for key in ENGINE_FIELDS:
                if key in fixed:
                    continue
                log_prior = math.log(float(cur.eng[key][cur.ver_eng[i]]))
                _Coordinate(cur, s, "ver", key, i, [i], log_prior, ceiling=ceiling).update(sweep)
    return _loss(*_predict(everything, cur.view(everything)), everything)


def select_rows(rows: Sequence[dict[str, str]], max_rows: int | None) -> list[dict[str, str]]:
    """A deterministic, stratified subsample: rows ordered by (model, system, backend, hash of id),
    every k-th kept."""
    if max_rows is None or len(rows) <= max_rows:
        return list(rows)

    def key(r: dict[str, str]) -> tuple[str, str, str, str]:
        h = hashlib.sha256((r.get("id") or "").encode()).hexdigest()
        return (r.get("model_path", ""), r.get("system", ""), r.get("backend", ""), h)

    ordered = sorted(rows, key=key)
    step = len(ordered) / max_rows
    return [ordered[int(i * step)] for i in range(max_rows)]


def fit(
    rows: Sequence[dict[str, str]],
    models_dir: Path | str,
    table: ParamTable,
    rounds: int = 2,
    sweeps: int = 5,
    max_rows: int | None = None,
    jobs: int = 1,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    versions: bool = False,
    fixed: Sequence[str] = (),
    anchor: float = 0.0,
    score: bool = False,
    ceiling: float | None = None,
    each_sweep: bool = True,
) -> tuple[ParamTable, FitReport, FitData]:
    """Replay (recording) and fit, ``rounds`` times. Only fully specified rows with measurements.
    ``fixed``: constants held at the start table's values (``fit_constants``); ``anchor`` > 0:
    every other constant pulled towards its start value, ``anchor`` per row, instead of towards
    its prior (a refit of a few rows of one deployment from fitted constants: ``calibrate fit
    --start``; benchmarks/deployment_refit.py measures what it does). ``score``: replay the
    rows once more with the fitted constants, and keep both that replay and the first round's
    (the start constants') in the report (``FitReport.start_predictions``, ``fitted_predictions``).
    ``ceiling``: no GEMM or attention kernel of the rows above that fraction of its peak
    (``fit_constants``; None: no limit, as before ``calibrate fit --ceiling``).
    ``each_sweep``: log every sweep's loss (a fit of the whole file, each sweep minutes), or
    only each round's first and last (a few rows, forty sweeps in seconds).
    ``versions``: also fit engine constants per engine version (``collect``); off by default,
    because in the calibration file most versions ran one model's campaign, so their constants
    learn that campaign rather than the release (docs/perf.md §5 shows what that does to a model
    held out). Without it, versions in the start table are dropped."""
    if not versions:
        table = table.copy()
        table.versions = {}
    chosen = select_rows(fitting_rows(rows), max_rows)
    origin = table
    report: FitReport | None = None
    data: FitData | None = None
    first: list[RowPrediction] = []
    for rnd in range(rounds):
        preds = predict_rows(chosen, models_dir, table, record=True, jobs=jobs, progress=progress)
        if score and not first:  # without the recorded steps, which the next round's replay replaces
            first = [replace(p, recorded=None) for p in preds]
        data = collect(preds, versions=versions)
        if log:
            log(f"round {rnd + 1}: {len(data.ids)} rows replayed, {len(data.row)} recorded steps")
        sweep_log = log if each_sweep else None
        table, report = fit_constants(
            data, table, sweeps=sweeps, fixed=fixed, log=sweep_log, anchor=anchor, origin=origin, ceiling=ceiling
        )
        if log and not each_sweep:
            log(f"round {rnd + 1}: {sweeps} sweeps, loss {report.loss_before:.4g} → {report.loss_after:.4g}")
    assert report is not None and data is not None
    if score:
        report.start_predictions = first
        report.fitted_predictions = predict_rows(chosen, models_dir, table, jobs=jobs, progress=progress)
    return table, report, data
