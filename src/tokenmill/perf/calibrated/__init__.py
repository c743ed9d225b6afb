"""Fitted constants, shipped as data (``params.json``), and how a (GPU, engine) pair reads them.

``params.json`` holds four tables: ``global`` (fields fitted once), ``gpus`` (per GPU kind, by
catalog name), ``backends`` (per engine constants) and ``versions`` (the engine constants of one
engine version, ``vllm@0.19.0``, where the measurements hold enough rows of it: engines change
their host overheads and kernels from release to release). ``tokenmill calibrate fit`` rewrites
it; the command that produced it is stored in the file.

Fallbacks, always reported in the notes: a GPU without fitted values takes the kernel
efficiencies of the fitted GPU of the same architecture (GB300 → B300) and, for the constants
fitted for its memory and links (``PER_GPU_FIELDS``: per GPU, or per scale-up fabric), the median of the fitted GPUs'
values; a GPU of an architecture no fitted GPU shares (MI355X) takes those medians for every
per-GPU constant; a table without GPUs, the priors of ``PerfParams``; an engine without
fitted constants takes the priors; a version without fitted constants takes its engine's.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.jsonfile import read_json_object
from tokenmill.perf.params import ENGINE_FIELDS, GLOBAL_FIELDS, GPU_FIELDS, PER_GPU_FIELDS, PerfParams

PARAMS_FILE = "params.json"
_KNOWN = {f.name for f in fields(PerfParams)}


#: Constants for which 0 is meaningful: no front-end cost (an engine with its own detokeniser
#: process), no overlap of the CPU step with the device's work (a CPU device runs both), a flat
#: GEMM efficiency, no pipeline lag before a first token reaches the client, no routing kernels of
#: their own in an MoE layer (a CPU fit counts them among the per-layer gaps), no HBM passes over
#: the experts' inputs of their own (a CPU fit counts its gather and scatter in the kernel rates).
_ZERO_ALLOWED = frozenset(
    {
        "stream_per_token_s",
        "front_end_per_request_s",
        "cpu_overlap",
        "gemm_half_rows",
        "prefill_seq_overhead_s",
        "padded_prefill",
        "linear_chunk_step_s",
        "first_token_steps",
        "moe_layer_overhead_s",
        "moe_activation_passes",
    }
)


def _param_values(obj: Any, what: str, source: str, allow_zero: bool) -> dict[str, float]:
    """A table of named constants, checked: known names, finite numbers > 0 (or >= 0 for the
    constants where 0 means "none", when ``allow_zero``)."""
    if not isinstance(obj, dict):
        raise TokenmillError(f"{source}: '{what}' must be an object")
    out: dict[str, float] = {}
    for k, v in obj.items():
        if k not in _KNOWN:
            raise TokenmillError(f"{source}: unknown parameter {k!r} in '{what}'")
        zero_ok = allow_zero and k in _ZERO_ALLOWED
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not math.isfinite(v)
            or v < 0
            or (v == 0 and not zero_ok)
        ):
            raise TokenmillError(
                f"{source}: {what}.{k} must be a {'finite number >= 0' if zero_ok else 'positive number'}"
            )
        out[k] = float(v)
    return out


@dataclass
class ParamTable:
    """Fitted values by scope; anything absent falls back as the module docstring says."""

    global_: dict[str, float] = field(default_factory=dict)
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    backends: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: Engine constants of one engine version ("vllm@0.19.0"), refining the engine's (``resolve``).
    versions: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "meta": self.meta,
            "global": {k: self.global_[k] for k in sorted(self.global_)},
            "gpus": {g: {k: v[k] for k in sorted(v)} for g, v in sorted(self.gpus.items())},
            "backends": {b: {k: v[k] for k in sorted(v)} for b, v in sorted(self.backends.items())},
        }
        if self.versions:  # only tables fitted with --versions have them
            out["versions"] = {b: {k: v[k] for k in sorted(v)} for b, v in sorted(self.versions.items())}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "params") -> ParamTable:
        def table(obj: Any, what: str) -> dict[str, float]:
            return _param_values(obj, what, source, allow_zero=False)

        def section(key: str) -> dict[str, Any]:
            value = data.get(key) or {}
            if not isinstance(value, dict):
                raise TokenmillError(f"{source}: '{key}' must be an object (got {type(value).__name__})")
            return value

        if not isinstance(data, dict):
            raise TokenmillError(f"{source}: expected a JSON object, got {type(data).__name__}")
        return cls(
            global_=table(data.get("global", {}), "global"),
            gpus={g: table(v, f"gpus.{g}") for g, v in section("gpus").items()},
            backends={b: table(v, f"backends.{b}") for b, v in section("backends").items()},
            meta=dict(section("meta")),
            versions={b: _version_values(b, v, source) for b, v in section("versions").items()},
        )

    def write(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def copy(self) -> ParamTable:
        return ParamTable(
            dict(self.global_),
            {g: dict(v) for g, v in self.gpus.items()},
            {b: dict(v) for b, v in self.backends.items()},
            dict(self.meta),
            {b: dict(v) for b, v in self.versions.items()},
        )

    def gpu_source(self, gpu: str) -> tuple[str, str | None]:
        """Where ``gpu``'s per-GPU constants come from, and the table's GPU they are taken from:
        ("fitted", gpu), ("sibling", a fitted GPU of its architecture: its die's constants, the
        medians for memory and links), ("medians", None) or, for a table without GPUs, ("priors",
        None). ``resolve`` applies it; ``constants_source`` says it."""
        if gpu in self.gpus:
            return "fitted", gpu
        sibling = same_architecture(gpu, self.gpus)
        if sibling is not None:
            return "sibling", sibling
        return ("medians", None) if self.gpus else ("priors", None)

    def gpu_values(self, gpu: str) -> dict[str, float]:
        """``gpu``'s per-GPU constants as every command reads them: its own where the table names
        it, else what ``resolve`` gives a GPU it does not (a sibling's die and the fitted GPUs'
        medians, or the medians, or the priors). A refit on a new GPU's rows starts there and is
        pulled back there, so its first prediction is ``predict``'s."""
        if gpu in self.gpus:
            return dict(self.gpus[gpu])
        resolved, _ = self.resolve(gpu, None)
        return {k: float(getattr(resolved, k)) for k in GPU_FIELDS}

    def moved_from(self, start: ParamTable, least: float = 0.05) -> list[tuple[str, float, float]]:
        """The constants this table holds at a value other than ``start``'s by ``least`` (a
        fraction) or more, as (``scope.key``, start value, this value), the largest move first: what
        a refit from ``start`` on a deployment's rows says that deployment differs in. A GPU or
        engine ``start`` does not name is measured from what ``start`` gives it (``gpu_values``;
        an engine's priors)."""
        pairs = [(f"global.{k}", start.global_.get(k), v) for k, v in self.global_.items()]
        for name, values in self.gpus.items():
            theirs = start.gpu_values(name)
            pairs += [(f"gpus.{name}.{k}", theirs.get(k), v) for k, v in values.items()]
        prior = PerfParams()
        for name, values in self.backends.items():
            own = start.backends.get(name, {})
            pairs += [(f"backends.{name}.{k}", own.get(k, getattr(prior, k)), v) for k, v in values.items()]
        moved = [(k, a, b) for k, a, b in pairs if a and b and abs(math.log(b / a)) >= math.log1p(least)]
        return sorted(moved, key=lambda m: (-abs(math.log(m[2] / m[1])), m[0]))

    def resolve(self, gpu: str, backend: str | None, version: str | None = None) -> tuple[PerfParams, list[str]]:
        """The constants for ``gpu`` (a catalog name) under ``backend`` (at ``version``, where that
        version has fitted engine constants; else the engine's), and where they came from."""
        notes: list[str] = []
        values: dict[str, float] = dict(self.global_)
        if self.global_ and len(self.global_) < len(GLOBAL_FIELDS):
            missing = sorted(set(GLOBAL_FIELDS) - set(self.global_))
            notes.append(f"global constants {', '.join(missing)}: priors")
        kind, source = self.gpu_source(gpu)
        if kind != "fitted":
            if kind == "sibling":
                notes.append(
                    f"GPU {gpu}: not calibrated; using {source}'s fitted kernel efficiencies (same architecture) "
                    f"and the median of the fitted GPUs' {' and '.join(PER_GPU_FIELDS)}"
                )
            elif kind == "medians":
                medians = self._medians(GPU_FIELDS)
                values.update(medians)
                note = (
                    f"GPU {gpu}: not calibrated, nor any GPU of its architecture; each per-GPU constant is the "
                    f"median of the fitted GPUs' ({', '.join(sorted(self.gpus))})"
                )
                missing = [f for f in GPU_FIELDS if f not in medians]
                notes.append(note + (f"; priors for {', '.join(missing)}" if missing else ""))
            else:
                notes.append(f"GPU {gpu}: not calibrated; priors for {', '.join(GPU_FIELDS)}")
        if source is not None:
            values.update(self.gpus[source])
            if source != gpu:
                # the die's constants are the sibling's; its memory's and links' are no more the
                # sibling's than any other GPU's (docs/perf.md §5, "Leave one GPU out")
                values.update(self._medians(PER_GPU_FIELDS))
        if backend is not None:
            if backend in self.backends:
                values.update(self.backends[backend])
            else:
                notes.append(f"engine {backend}: not calibrated; multipliers {', '.join(ENGINE_FIELDS)} = 1 (prior)")
            if version:
                key = version_key(backend, version)
                if key in self.versions:
                    values.update(self.versions[key])
                else:
                    notes.append(f"{backend} {version}: no constants fitted for this version; the engine's are used")
        else:
            notes.append(f"no engine given: multipliers {', '.join(ENGINE_FIELDS)} = 1 (prior)")
        return PerfParams(**values), notes

    def _medians(self, keys: Iterable[str]) -> dict[str, float]:
        """Each of ``keys`` (per-GPU constants) as the median of the fitted GPUs' values: what a GPU
        the table does not name takes where no sibling's value applies.

        Why not the priors: every fitted GPU lands on the same side of them (weights streamed at
        59–74 % of HBM bandwidth against the prior's 75 %, collectives at 19–37 µs against 8 µs,
        grouped expert GEMMs at 0.19–0.28 against 0.45), so the fits say more about a new GPU's
        software stack than the priors do (docs/perf.md §5, "Leave one GPU out"). The 4-bit ratio
        is taken over the fitted GPUs with a 4-bit peak only (the others never use it)."""
        medians: dict[str, float] = {}
        for key in keys:
            over = [n for n in self.gpus if _has_fp4(n)] if key == "fp4_matmul_ratio" else list(self.gpus)
            vals = [self.gpus[n][key] for n in over if key in self.gpus[n]]
            if vals:
                medians[key] = statistics.median(vals)
        return medians


def _has_fp4(gpu: str) -> bool:
    try:
        return "fp4" in load_gpu(gpu).dense_flops
    except TokenmillError:
        return False


def version_key(backend: str, version: str) -> str:
    """The key of an engine version's constants: ``vllm@0.19.0``."""
    return f"{backend.strip().lower()}@{version.strip()}"


def _version_values(key: str, obj: Any, source: str) -> dict[str, float]:
    if "@" not in key:
        raise TokenmillError(f"{source}: versions.{key}: the key must be ENGINE@VERSION (e.g. vllm@0.19.0)")
    values = _param_values(obj, f"versions.{key}", source, allow_zero=False)
    extra = sorted(set(values) - set(ENGINE_FIELDS))
    if extra:
        raise TokenmillError(
            f"{source}: versions.{key}: only engine constants ({', '.join(ENGINE_FIELDS)}) are fitted per version, "
            f"got {', '.join(extra)}"
        )
    return values


def same_architecture(gpu: str, names: Iterable[str]) -> str | None:
    """The first of ``names`` (in sorted order) whose GPU has ``gpu``'s architecture: the GPU whose
    fitted constants a GPU the table does not name borrows (``ParamTable.resolve``), or None."""
    try:
        arch = load_gpu(gpu).architecture
    except TokenmillError:
        return None
    for name in sorted(names):
        try:
            if load_gpu(name).architecture == arch:
                return name
        except TokenmillError:
            continue
    return None


def shipped_path() -> Path:
    return Path(str(resources.files("tokenmill.perf.calibrated") / PARAMS_FILE))


def load_table(path: Path | str | None = None) -> ParamTable:
    """The shipped table (or the one at ``path``); an empty table (all priors) if none shipped."""
    p = Path(path) if path is not None else shipped_path()
    if not p.exists():
        if path is not None:
            raise TokenmillError(f"--params: no such file {p}")
        return ParamTable(meta={"note": "no fitted parameters shipped: priors everywhere"})
    return ParamTable.from_json(read_json_object(p), str(p))


def params_for(gpu: str, backend: str | None = None, path: Path | str | None = None) -> tuple[PerfParams, list[str]]:
    """Calibrated ``PerfParams`` for a GPU (catalog name or alias) and engine, with fallback notes."""
    try:
        name = load_gpu(gpu).name
    except TokenmillError:
        name = gpu
    return load_table(path).resolve(name, backend)


# --------------------------------------------------------------------------------------------
# Constants measured on this machine (``tokenmill calibrate local``)
# --------------------------------------------------------------------------------------------

LOCAL_PARAMS_SUFFIX = ".perf.json"


def local_params_path(gpu: str) -> Path:
    """Where the fitted constants of a measured entry live: beside its TOML file.

    ``gpu`` is what ``--gpu`` got: a name (``cpu``: the user hardware folder) or a ``.toml`` path.
    """
    from tokenmill.paths import user_hardware_dir

    if gpu.endswith(".toml") or "/" in gpu:
        p = Path(gpu).expanduser()
        return p.with_name(p.name.removesuffix(".toml") + LOCAL_PARAMS_SUFFIX)
    return user_hardware_dir() / f"{gpu.strip().lower()}{LOCAL_PARAMS_SUFFIX}"


def write_local_params(path: Path, params: PerfParams, meta: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"meta": meta, "params": params.to_dict()}, indent=2) + "\n")
    tmp.replace(path)


def local_params(gpu: str) -> tuple[PerfParams, list[str]] | None:
    """The constants ``calibrate local`` fitted for ``gpu``, or None when it has none."""
    path = local_params_path(gpu)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TokenmillError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    raw = data.get("params") if isinstance(data, dict) else None
    values = _param_values(raw, "params", str(path), allow_zero=True)
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise TokenmillError(f"{path}: 'meta' must be an object")
    when = meta.get("measured_at", "?")
    return PerfParams(**values), [f"constants fitted on this machine by `tokenmill calibrate local` ({when})"]


def constants_source(gpu: str, table: ParamTable | None = None) -> str:
    """Where ``predict`` takes ``gpu``'s per-GPU constants from, in a few words, for the catalog's
    table: fitted on the calibration file, a sibling's die with the fitted GPUs' medians for its
    memory and links, the medians for everything, the priors, or this machine's
    ``calibrate local`` fit (``ParamTable.resolve``, ``resolve_params``)."""
    from tokenmill.hardware import known_gpu_names

    table = table if table is not None else load_table()
    name = gpu.strip().lower()
    if name not in known_gpu_names() and local_params_path(gpu).is_file():
        return "measured here (calibrate local)"
    kind, sibling = table.gpu_source(name)
    return {"sibling": f"{sibling}'s die, medians", "medians": "fitted GPUs' medians"}.get(kind, kind)


def resolve_params(gpu: str, backend: str | None) -> tuple[PerfParams, list[str]]:
    """The constants a simulation of ``gpu`` uses, and where they came from.

    A measured entry (``calibrate local``) uses its own fit (its engine is tokenmill's); otherwise
    ``--backend`` picks the calibrated constants of that engine on that GPU, and without one the
    priors of ``PerfParams`` apply (what ``simulate`` has always done).
    """
    # A bundled GPU is never shadowed by a user file (as ``load_gpu`` ignores a user h200.toml).
    from tokenmill.hardware import known_gpu_names

    bundled = gpu.strip().lower().replace("-", "_") in known_gpu_names()
    local = None if bundled else local_params(gpu)
    if local is not None and backend in (None, "tokenmill"):
        return local
    if backend is None:
        return PerfParams(), ["no --backend: the cost model's priors (docs/perf.md)"]
    return params_for(gpu, backend)
