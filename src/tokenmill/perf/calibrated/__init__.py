"""Fitted constants, shipped as data (``params.json``), and how a (GPU, engine) pair reads them.

``params.json`` holds three tables: ``global`` (fields fitted once), ``gpus`` (per GPU kind, by
catalog name) and ``backends`` (per engine multipliers). ``tokenmill calibrate fit`` rewrites it;
the command that produced it is stored in the file.

Fallbacks, always reported in the notes: a GPU without fitted values takes those of the fitted
GPU of the same architecture (GB300 → B300), else the priors of ``PerfParams``; an engine without
fitted multipliers takes 1.0 (the prior).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf.params import ENGINE_FIELDS, GLOBAL_FIELDS, GPU_FIELDS, PerfParams

PARAMS_FILE = "params.json"
_KNOWN = {f.name for f in fields(PerfParams)}


@dataclass
class ParamTable:
    """Fitted values by scope; anything absent falls back as the module docstring says."""

    global_: dict[str, float] = field(default_factory=dict)
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    backends: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "global": {k: self.global_[k] for k in sorted(self.global_)},
            "gpus": {g: {k: v[k] for k in sorted(v)} for g, v in sorted(self.gpus.items())},
            "backends": {b: {k: v[k] for k in sorted(v)} for b, v in sorted(self.backends.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "params") -> ParamTable:
        def table(obj: Any, what: str) -> dict[str, float]:
            if not isinstance(obj, dict):
                raise TokenmillError(f"{source}: '{what}' must be an object")
            out: dict[str, float] = {}
            for k, v in obj.items():
                if k not in _KNOWN:
                    raise TokenmillError(f"{source}: unknown parameter {k!r} in '{what}'")
                if not isinstance(v, int | float) or v <= 0:
                    raise TokenmillError(f"{source}: {what}.{k} must be a positive number")
                out[k] = float(v)
            return out

        return cls(
            global_=table(data.get("global", {}), "global"),
            gpus={g: table(v, f"gpus.{g}") for g, v in (data.get("gpus") or {}).items()},
            backends={b: table(v, f"backends.{b}") for b, v in (data.get("backends") or {}).items()},
            meta=dict(data.get("meta") or {}),
        )

    def write(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def copy(self) -> ParamTable:
        return ParamTable(
            dict(self.global_),
            {g: dict(v) for g, v in self.gpus.items()},
            {b: dict(v) for b, v in self.backends.items()},
            dict(self.meta),
        )

    def resolve(self, gpu: str, backend: str | None) -> tuple[PerfParams, list[str]]:
        """The constants for ``gpu`` (a catalog name) under ``backend``, and where they came from."""
        notes: list[str] = []
        values: dict[str, float] = dict(self.global_)
        if self.global_ and len(self.global_) < len(GLOBAL_FIELDS):
            missing = sorted(set(GLOBAL_FIELDS) - set(self.global_))
            notes.append(f"global constants {', '.join(missing)}: priors")
        source: str | None = gpu
        if gpu not in self.gpus:
            source = _same_architecture(gpu, self.gpus)
            if source is None:
                notes.append(f"GPU {gpu}: not calibrated; priors for {', '.join(GPU_FIELDS)}")
            else:
                notes.append(f"GPU {gpu}: not calibrated; using {source}'s fitted values (same architecture)")
        if source is not None:
            values.update(self.gpus[source])
        if backend is not None:
            if backend in self.backends:
                values.update(self.backends[backend])
            else:
                notes.append(f"engine {backend}: not calibrated; multipliers {', '.join(ENGINE_FIELDS)} = 1 (prior)")
        else:
            notes.append(f"no engine given: multipliers {', '.join(ENGINE_FIELDS)} = 1 (prior)")
        return PerfParams(**values), notes


def _same_architecture(gpu: str, fitted: dict[str, dict[str, float]]) -> str | None:
    try:
        arch = load_gpu(gpu).architecture
    except TokenmillError:
        return None
    for name in sorted(fitted):
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
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise TokenmillError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return ParamTable.from_json(data, str(p))


def params_for(gpu: str, backend: str | None = None, path: Path | str | None = None) -> tuple[PerfParams, list[str]]:
    """Calibrated ``PerfParams`` for a GPU (catalog name or alias) and engine, with fallback notes."""
    try:
        name = load_gpu(gpu).name
    except TokenmillError:
        name = gpu
    return load_table(path).resolve(name, backend)
