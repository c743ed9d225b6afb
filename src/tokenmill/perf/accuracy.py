"""How far the fitted constants' predictions land from measurements: the error a ``predict`` carries.

A TTFT predicted at 0.52 s means little without knowing that, on the measured rows of the same
engine, the model was off by a median 38 %. ``calibrate evaluate --accuracy-out FILE``
writes that from the rows it scores, per group of rows: all of them, each engine, and each GPU
under each engine. For every group it keeps the median and p90 absolute percentage error of TTFT
and TPOT and the 10th and 90th percentiles of measured ÷ predicted, which give an interval: 80 %
of the group's rows measured between ``p10 ×`` and ``p90 ×`` their prediction.

The shipped ``calibrated/accuracy.json`` is that file for the shipped ``params.json`` on the
calibration file, and it records the SHA-256 of the constants it measured: ``predict`` shows it
only when it predicts with those same constants (a refit without a new evaluate, or ``--params``,
gets a note instead of a stale band). A prediction takes the band of its GPU under its engine when
that group has ``MIN_ROWS`` scored rows of ``MIN_MODELS`` models or more, else its engine's, else
all rows', and says which: one model's campaign (the 31 B300/SGLang rows are all DeepSeek-V3 under
one release) says how that campaign went, not what a model the rows do not hold will see. Even so
a band describes the calibration rows, and a model held out of the fit is predicted up to about
twice as far off in TTFT (docs/perf.md §5). So the file can also hold *held-out* bands
(``held_out_groups``, written by ``benchmarks/calibrate_lomo.py --accuracy``): the same statistics
over predictions of each calibration model by constants refitted without it, and the list of the
models whose rows were scored (``models``, by architecture: ``model_key``). A prediction for a
model not in that list takes the held-out band, the error to expect for a model the fit never saw.

A GPU the calibration file does not hold is the same question for hardware, with two answers:
``predict`` gives a GPU of a calibrated architecture (GB300, a Blackwell Ultra like B300) that
GPU's fitted kernel efficiencies and the fitted GPUs' medians for the rest, and one of a new
architecture (MI355X) the fitted GPUs' medians of each constant. So the file can also hold the
bands of each calibration GPU predicted as such a GPU would be, by constants refitted without it
(``held_out_gpu_groups``) and without its whole architecture (``held_out_architecture_groups``),
both written by
``benchmarks/calibrate_lomo.py --hold-out gpu|architecture --accuracy``. A prediction for a GPU
not among the scored ones takes the band of its case; where neither its GPU nor its model was
scored, the wider of its GPU's and its model's held-out bands (neither was measured on rows new
in both ways), and the note says both are new.

Constants refitted on a deployment's own runs (``calibrate fit --start``) are other constants than
the band measured, and they describe one deployment. So the file can also hold the bands of such
refits (``refit_same_lengths_groups`` and ``refit_other_lengths_groups``, written by
``benchmarks/deployment_refit.py --accuracy``): every calibration deployment refitted from the
shipped constants on three of its runs and its other rows predicted, at the lengths of those runs
and at other lengths. A refit records the constants it started from and the points it was fitted
on (``params.json``'s ``meta.start_sha256`` and ``meta.fit_points``); a prediction with it, of a
deployment it was fitted on (GPU, engine and model) and from the constants the bands measured,
takes the refit band of its lengths.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import same_architecture

ACCURACY_FILE = "accuracy.json"
#: A group of rows gives a band of its own from this many scored rows.
MIN_ROWS = 20
#: ... and of this many models.
MIN_MODELS = 2
ALL = "all"
#: The band kinds of a refit on a deployment's own runs (``AccuracyTable.held_out_groups``): its
#: other rows at the lengths it was refitted on, and at other lengths.
REFIT_SAME, REFIT_OTHER = "refit-same-lengths", "refit-other-lengths"
#: The fewest runs a deployment's refit was measured on (benchmarks/deployment_refit.py refits
#: each deployment on three, or two where it ran two concurrencies): a refit on fewer gets no band.
MIN_REFIT_POINTS = 2
#: The file's sections of each kind of band beyond the calibration rows' own ``groups``.
SECTIONS = {
    "model": "held_out_groups",
    "gpu": "held_out_gpu_groups",
    "architecture": "held_out_architecture_groups",
    REFIT_SAME: "refit_same_lengths_groups",
    REFIT_OTHER: "refit_other_lengths_groups",
}


@dataclass(frozen=True)
class Scored:
    """One scored row: where it ran and what was predicted and measured (ms)."""

    gpu: str
    backend: str
    model: str
    pred_ttft_ms: float
    meas_ttft_ms: float
    pred_tpot_ms: float
    meas_tpot_ms: float


@dataclass(frozen=True)
class ErrorBand:
    """Errors of one group of rows (fractions: 0.28 is 28 %)."""

    scope: str
    rows: int
    models: int
    ttft_median_ape: float
    ttft_p90_ape: float
    tpot_median_ape: float
    tpot_p90_ape: float
    ttft_ratio_p10: float  # measured ÷ predicted, 10th percentile
    ttft_ratio_p90: float
    tpot_ratio_p10: float
    tpot_ratio_p90: float

    def log_width(self) -> float:
        """How wide the band's two 80 % intervals are together, as log(p90 / p10) of TTFT plus
        that of TPOT: which of two bands says less about a prediction."""
        tiny = 1e-9  # a p10 of 0 (a file may say so): as wide as it gets
        ttft = math.log(max(self.ttft_ratio_p90, tiny) / max(self.ttft_ratio_p10, tiny))
        return ttft + math.log(max(self.tpot_ratio_p90, tiny) / max(self.tpot_ratio_p10, tiny))

    def interval(self, metric: str, predicted: float) -> tuple[float, float]:
        """Where 80 % of the group's rows measured, applied to ``predicted`` (metric: ttft|tpot)."""
        lo, hi = (
            (self.ttft_ratio_p10, self.ttft_ratio_p90)
            if metric == "ttft"
            else (self.tpot_ratio_p10, self.tpot_ratio_p90)
        )
        return predicted * lo, predicted * hi

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def group_key(gpu: str, backend: str) -> str:
    return f"{gpu}/{backend}"


def model_key(model: Any) -> str:
    """A model as the bands tell models apart: its architecture (family, layers, hidden size,
    vocabulary, routed experts), not its name or its quantisation, so that a catalog preset, a
    ``config.json`` of the same model and a re-quantized checkpoint of it are one model, as in the
    leave-one-model-out grouping (docs/perf.md §5)."""
    experts = model.moe.num_experts if model.moe is not None else 0
    return f"{model.family}/{model.num_layers}L/{model.hidden_size}h/{model.vocab_size}v/{experts}e"


def scored_rows(preds: Iterable[Any]) -> list[Scored]:
    """``Scored`` rows of calibration predictions (``row_prediction.RowPrediction``): the fully
    specified rows that were predicted and have both measurements."""
    from tokenmill.hardware import load_gpu

    return [
        Scored(
            load_gpu(p.system).name, p.backend, p.model, p.ttft_ms, p.measured_ttft_ms, p.tpot_ms, p.measured_tpot_ms
        )
        for p in preds
        if p.fully_specified and p.predicted and p.measured_ttft_ms and p.measured_tpot_ms
    ]


def _band(scope: str, rows: list[Scored]) -> ErrorBand:
    import numpy as np  # here, not at the top: `predict` reads bands and should not pay numpy's import

    pt = np.array([r.pred_ttft_ms for r in rows])
    mt = np.array([r.meas_ttft_ms for r in rows])
    pp = np.array([r.pred_tpot_ms for r in rows])
    mp = np.array([r.meas_tpot_ms for r in rows])
    ape_t = np.abs(pt / mt - 1.0)
    ape_p = np.abs(pp / mp - 1.0)
    return ErrorBand(
        scope=scope,
        rows=len(rows),
        models=len({r.model for r in rows}),
        ttft_median_ape=float(np.median(ape_t)),
        ttft_p90_ape=float(np.percentile(ape_t, 90)),
        tpot_median_ape=float(np.median(ape_p)),
        tpot_p90_ape=float(np.percentile(ape_p, 90)),
        ttft_ratio_p10=float(np.percentile(mt / pt, 10)),
        ttft_ratio_p90=float(np.percentile(mt / pt, 90)),
        tpot_ratio_p10=float(np.percentile(mp / pp, 10)),
        tpot_ratio_p90=float(np.percentile(mp / pp, 90)),
    )


def measure(rows: Iterable[Scored]) -> dict[str, ErrorBand]:
    """Bands of all rows, of each engine and of each GPU under each engine (rows with a positive
    prediction and measurement of both metrics; groups without any are left out)."""
    usable = [
        r
        for r in rows
        if min(r.pred_ttft_ms, r.meas_ttft_ms, r.pred_tpot_ms, r.meas_tpot_ms) > 0
        and all(math.isfinite(x) for x in (r.pred_ttft_ms, r.meas_ttft_ms, r.pred_tpot_ms, r.meas_tpot_ms))
    ]
    groups: dict[str, list[Scored]] = {}
    for r in usable:
        for key in (ALL, r.backend, group_key(r.gpu, r.backend)):
            groups.setdefault(key, []).append(r)
    return {k: _band(k, v) for k, v in sorted(groups.items())}


def refit_points(rows: Iterable[dict[str, str]], models_dir: Path | str) -> list[list[Any]]:
    """The points a refit was fitted on, as a prediction is matched to them (``band_for``): [GPU,
    engine, model (``model_key``), ISL, OSL, concurrency], each once, sorted."""
    from tokenmill.hardware import load_gpu
    from tokenmill.perf.measurements import RowSpec, interpret, model_for_row

    points: set[tuple[str, str, str, int, int, int]] = set()
    for row in rows:
        it = interpret(row, models_dir)
        if isinstance(it, RowSpec):
            model = model_key(model_for_row(str(it.config_path), it.gemm_mode, it.moe_mode))
            points.add((load_gpu(it.system).name, it.backend, model, it.isl, it.osl, it.concurrency))
    return [list(point) for point in sorted(points)]


def fingerprint(path: Path | str) -> str:
    """SHA-256 of a constants file: which constants a band was measured with."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class AccuracyTable:
    params_sha256: str
    groups: dict[str, ErrorBand]
    meta: dict[str, Any]
    #: architectures (``model_key``) of the models whose rows ``groups`` scored; empty: not recorded
    models: tuple[str, ...] = ()
    #: the same groups over held-out predictions (each model by constants refitted without it)
    held_out: dict[str, ErrorBand] = field(default_factory=dict)
    #: ... each GPU by constants refitted without it (it borrows a GPU of its architecture)
    held_out_gpu: dict[str, ErrorBand] = field(default_factory=dict)
    #: ... each GPU by constants refitted without its architecture (the other GPUs' medians)
    held_out_architecture: dict[str, ErrorBand] = field(default_factory=dict)
    #: each calibration deployment's other rows by constants refitted on three of its runs
    #: (``calibrate fit --start``), at the lengths of those runs and at other lengths
    refit_same_lengths: dict[str, ErrorBand] = field(default_factory=dict)
    refit_other_lengths: dict[str, ErrorBand] = field(default_factory=dict)

    @property
    def gpus(self) -> set[str]:
        """The GPUs whose rows were scored (from the GPU-under-engine groups)."""
        return {k.split("/", 1)[0] for k in self.groups if "/" in k}

    def held_out_groups(self, held_out: str) -> dict[str, ErrorBand]:
        """The groups of a kind of held-out prediction ("model", "gpu", "architecture", or a
        deployment's refit: ``REFIT_SAME``, ``REFIT_OTHER``), or the calibration rows' ("")."""
        by_kind = {
            "": self.groups,
            "model": self.held_out,
            "gpu": self.held_out_gpu,
            "architecture": self.held_out_architecture,
            REFIT_SAME: self.refit_same_lengths,
            REFIT_OTHER: self.refit_other_lengths,
        }
        return by_kind[held_out]

    def band(self, gpu: str, backend: str, held_out: str = "") -> ErrorBand | None:
        """The GPU-under-engine band with ``MIN_ROWS`` rows of ``MIN_MODELS`` models or more, else
        the engine's, else all rows' (of the held-out groups of that kind with ``held_out``)."""
        groups = self.held_out_groups(held_out)
        for key in (group_key(gpu, backend), backend, ALL):
            b = groups.get(key)
            if b is not None and b.rows >= MIN_ROWS and b.models >= MIN_MODELS:
                return b
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "meta": {**self.meta, "params_sha256": self.params_sha256},
            "groups": {k: v.to_dict() for k, v in self.groups.items()},
        }
        if self.models:
            out["models"] = sorted(self.models)
        for kind, name in SECTIONS.items():
            groups = self.held_out_groups(kind)
            if groups:
                out[name] = {k: v.to_dict() for k, v in groups.items()}
        return out

    def write(self, path: Path | str) -> None:
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
            tmp.replace(p)
        except OSError as exc:
            raise TokenmillError(f"--accuracy-out: cannot write {p}: {exc.strerror}") from None


_BAND_FIELDS = [f.name for f in fields(ErrorBand)]


def _band_from_json(key: str, obj: Any, source: str, section: str = "groups") -> ErrorBand:
    key = f"{section}.{key}"
    if not isinstance(obj, dict):
        raise TokenmillError(f"{source}: {key} must be an object")
    missing = [f for f in _BAND_FIELDS if f not in obj]
    if missing:
        raise TokenmillError(f"{source}: {key} lacks {', '.join(missing)}")
    extra = sorted(set(obj) - set(_BAND_FIELDS))
    if extra:
        raise TokenmillError(f"{source}: {key}: unknown field {extra[0]!r} (allowed: {', '.join(_BAND_FIELDS)})")
    values: dict[str, Any] = {}
    for f in _BAND_FIELDS:
        v = obj[f]
        if f == "scope":
            if not isinstance(v, str):
                raise TokenmillError(f"{source}: {key}.scope must be a string")
        elif f in ("rows", "models"):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TokenmillError(f"{source}: {key}.{f} must be a positive integer")
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise TokenmillError(f"{source}: {key}.{f} must be a finite number >= 0")
        values[f] = v
    return ErrorBand(**values)


def shipped_accuracy_path() -> Path:
    return Path(str(resources.files("tokenmill.perf.calibrated") / ACCURACY_FILE))


def load_accuracy(path: Path | str | None = None) -> AccuracyTable | None:
    """The shipped accuracy table (or the one at ``path``); None when none is shipped."""
    p = Path(path) if path is not None else shipped_accuracy_path()
    if not p.exists():
        if path is not None:
            raise TokenmillError(f"no such accuracy file {p}")
        return None
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise TokenmillError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
        raise TokenmillError(f"{p}: 'groups' must be an object")
    meta = data.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("params_sha256"), str):
        raise TokenmillError(f"{p}: meta.params_sha256 must be a string (the SHA-256 of the constants measured)")
    groups = {k: _band_from_json(k, v, str(p)) for k, v in data["groups"].items()}
    models = data.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise TokenmillError(f"{p}: 'models' must be a list of strings (the scored models' architectures)")
    held: list[dict[str, ErrorBand]] = []
    for section in SECTIONS.values():
        obj = data.get(section, {})
        if not isinstance(obj, dict):
            raise TokenmillError(f"{p}: '{section}' must be an object")
        held.append({k: _band_from_json(k, v, str(p), section) for k, v in obj.items()})
    rest = {k: v for k, v in meta.items() if k != "params_sha256"}
    return AccuracyTable(meta["params_sha256"], groups, rest, tuple(models), *held)


class BandChoice(NamedTuple):
    """The band a prediction carries (None: none), where it comes from, and what it is held out
    for: "model" (a model the fit did not see), "gpu" (a GPU it did not see, of a calibrated
    architecture), "architecture" (a GPU of an architecture it did not see), or "" (the
    calibration rows' own band)."""

    band: ErrorBand | None
    note: str
    held_out: str = ""


def band_for(
    gpu: str,
    backend: str,
    params_path: Path | str,
    path: Path | str | None = None,
    model: str | None = None,
    lengths: tuple[int, int] | None = None,
) -> BandChoice:
    """The band a prediction with the constants at ``params_path`` carries, and a note on where it
    comes from (or why there is none). ``model`` (a ``model_key``) not among the scored models
    takes the held-out band where the file has one. Constants refitted on a deployment's runs take
    the refit band of ``lengths`` (ISL, OSL) where they apply (``_refit_band``)."""
    table = load_accuracy(path)
    if table is None:
        return BandChoice(None, "no accuracy measured for these constants (no accuracy.json shipped)")
    if not Path(params_path).exists() or fingerprint(params_path) != table.params_sha256:
        refit = _refit_band(table, params_path, gpu, backend, model, lengths)
        if refit is not None:
            return refit
        return BandChoice(
            None,
            "no accuracy measured for these constants (accuracy.json was measured with other constants; "
            "`tokenmill calibrate evaluate ... --accuracy-out` measures them)",
        )
    unseen = model is not None and bool(table.models) and model not in table.models
    scored_gpus = table.gpus
    new_gpu = bool(scored_gpus) and gpu not in scored_gpus
    borrowed = same_architecture(gpu, scored_gpus) if new_gpu else None
    # the held-out kinds that apply, of those the file holds; both a new GPU and a new model:
    # the wider band of the two (neither was measured on rows new in both ways)
    kinds = [k for k, new in (("gpu" if borrowed else "architecture", new_gpu), ("model", unseen)) if new]
    candidates = [(k, b) for k in kinds if table.held_out_groups(k) and (b := table.band(gpu, backend, k))]
    held_out, b = max(candidates, key=lambda kb: kb[1].log_width()) if candidates else ("", None)
    if b is None:
        b = table.band(gpu, backend)
    if b is None:
        return BandChoice(None, "no accuracy group with enough rows")
    key = group_key(gpu, backend)
    if b.scope == key:
        where = "this GPU under this engine"
    else:
        whose = "this engine's" if b.scope == backend else "all engines'"
        where = f"no {key} group with {MIN_ROWS}+ rows of {MIN_MODELS}+ models: {whose}"
    if held_out == "model":
        gpu_kind = "gpu" if borrowed else "architecture"
        also_gpu = ""
        if new_gpu:
            also_gpu = f"; {gpu} is not in the calibration file either, and " + (
                "its GPU held-out band is narrower"
                if table.held_out_groups(gpu_kind)
                else "a GPU held out of the fit misses by more (docs/perf.md §5)"
            )
        return BandChoice(
            b,
            f"error band from held-out predictions of {b.scope} ({b.rows} rows, {b.models} models; {where}): "
            "this model is not in the calibration file, so the band is how far the calibration models "
            "landed when each was predicted by constants refitted without it" + also_gpu,
            held_out,
        )
    if held_out:
        also_model = ""
        if unseen:
            narrower = "its model held-out band is narrower"
            also_model = "; the model is not in the calibration file either, and " + (
                narrower if table.held_out else "a model held out of the fit misses by more"
            )
        how = (
            f"its constants are {borrowed}'s (same architecture; weight bandwidth and collective latency the "
            "fitted GPUs' medians), so the band is how far each calibration GPU's rows landed when predicted by "
            "constants refitted without that GPU, from a GPU of its architecture"
            if held_out == "gpu"
            else "its architecture is not either, so its constants are the medians of the fitted GPUs', and the band "
            "is how far each calibration GPU's rows landed when predicted by constants refitted without its whole "
            "architecture"
        )
        return BandChoice(
            b,
            f"error band from held-out predictions of {b.scope} ({b.rows} rows, {b.models} models; {where}): "
            f"{gpu} is not in the calibration file; {how}{also_model}",
            held_out,
        )
    note = f"error band from the calibration rows of {b.scope} ({b.rows} rows, {b.models} models; {where})"
    if new_gpu:
        note += f"; {gpu} is not among them, and a GPU held out of the fit misses by more (docs/perf.md §5)"
    if unseen:
        note += "; this model is not among them, and a model held out of the fit misses by more (docs/perf.md §5)"
    return BandChoice(b, note)


def _refit_band(
    table: AccuracyTable,
    params_path: Path | str,
    gpu: str,
    backend: str,
    model: str | None,
    lengths: tuple[int, int] | None,
) -> BandChoice | None:
    """For constants refitted on a deployment's own runs from the constants ``table`` measured
    (``meta.start_sha256``), of the deployment being predicted (GPU, engine and model among
    ``meta.fit_points``, at ``MIN_REFIT_POINTS`` points or more): the band of a refit's other rows
    at the lengths it was fitted on, or at other lengths. A refit of another deployment, or on one
    run, gets no band and a note that says so; constants that are no such refit, None."""
    from tokenmill.perf.calibrated import load_table

    if not table.refit_same_lengths or not Path(params_path).exists():
        return None
    meta = load_table(params_path).meta
    if meta.get("start_sha256") != table.params_sha256:
        return None
    listed = meta.get("fit_points")
    points = [pt for pt in listed if isinstance(pt, list) and len(pt) == 6] if isinstance(listed, list) else []
    points = [pt for pt in points if all(isinstance(x, str) for x in pt[:3])]
    if not points:  # written before refits recorded their points, or edited: not a refit it can place
        return None
    here = [pt for pt in points if pt[:3] == [gpu, backend, model]]
    if not here:
        fitted = sorted({f"{pt[2].split('/')[0]} on {pt[0]} under {pt[1]}" for pt in points})
        return BandChoice(
            None,
            "no accuracy measured for these constants: they were refitted on runs of "
            f"{'; '.join(fitted)}, and a refit's band holds for its own deployment",
        )
    if len(here) < MIN_REFIT_POINTS:
        return BandChoice(
            None,
            f"no accuracy measured for these constants: they were refitted on one run of this deployment, and "
            f"the refit bands were measured on refits of {MIN_REFIT_POINTS} or 3 (benchmarks/deployment_refit.py)",
        )
    same = lengths is not None and any(tuple(pt[3:5]) == tuple(lengths) for pt in here)
    kind = REFIT_SAME if same else REFIT_OTHER
    b = table.band(gpu, backend, kind)
    if b is None:
        return None
    where = (
        "this GPU under this engine"
        if b.scope == group_key(gpu, backend)
        else ("this engine's" if b.scope == backend else "all engines'")
    )
    at = "at the prompt and answer lengths it was refitted on" if same else "at other lengths than it was refitted on"
    return BandChoice(
        b,
        f"error band of a deployment refitted on its own runs, {at} ({b.rows} rows of {b.scope}, {b.models} "
        f"models; {where}): how far each calibration deployment's other rows landed when predicted by "
        "constants refitted from the shipped ones on three of its runs (benchmarks/deployment_refit.py)",
        kind,
    )
