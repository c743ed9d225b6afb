"""The GPU catalog: one human-edited TOML file per GPU, loaded into a frozen :class:`GPU`.

Why data files rather than Python constants: GPU figures change (new SKUs, corrected datasheets,
a different nvidia-smi reading) and each needs a citation. A TOML file keeps every number next to
a comment naming its source, in the unit the source uses (decimal GB, MiB, TB/s, TFLOP/s), and lets
a user describe a GPU we do not ship by pointing ``load_gpu`` at their own file.

The loader converts those source units into canonical ones once (bytes, bytes/s, FLOP/s, watts),
so nothing downstream ever multiplies by 1000 vs 1024 on its own.

Two memory figures are kept on purpose. ``memory_sold_bytes`` is the marketing capacity taken as
decimal GB, which is how the seed article draws its bars (141 GB H200 = 131 GiB).
``memory_visible_bytes`` is what the driver reports as total (nvidia-smi's MiB), which is what a
serving engine can actually carve up. The marketed "GB" is usually closer to GiB, so the visible
figure is often *larger* than the sold one in bytes; do not assume visible <= sold.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tokenmill.errors import TokenmillError
from tokenmill.paths import path_is_file, user_hardware_dir
from tokenmill.units import GB, TB, GiB, MiB

__all__ = [
    "DTYPES",
    "DTYPE_ALIASES",
    "GPU",
    "GPU_TABLE_COLUMNS",
    "gpu_table_rows",
    "known_gpu_names",
    "list_gpus",
    "load_gpu",
    "parse_gpu_toml",
]

_TFLOPS: Final = 10**12

#: Tensor-core dtypes a catalog file may list under ``[dense_tflops]``. A closed set, so a typo
#: like ``bf61`` is an error rather than a silently ignored rate.
DTYPES: Final[tuple[str, ...]] = ("bf16", "fp16", "tf32", "fp8", "fp4", "int8")

#: Other spellings of a dtype (framework names, format names) mapped to the catalog key. FP8 and
#: FP4 formats share one tensor-core rate per width, so the format variants all map to the width.
DTYPE_ALIASES: Final[Mapping[str, str]] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "tensorfloat32": "tf32",
    "fp8_e4m3": "fp8",
    "e4m3": "fp8",
    "float8_e4m3fn": "fp8",
    "fp8_e5m2": "fp8",
    "e5m2": "fp8",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}

#: Other names for bundled GPUs: the calibration CSV's system names and common SKU suffixes.
#: Keys are already normalised (lower-case, ``-`` and spaces turned into ``_``).
_GPU_ALIASES: Final[Mapping[str, str]] = {
    "h100_sxm": "h100",
    "h100_sxm5": "h100",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b200_hgx": "b200",
    "b300_sxm": "b300",
    "b300_hgx": "b300",
    "gb200_nvl72": "gb200",
    "gb300_nvl72": "gb300",
    "a100_sxm": "a100",
    "a100_sxm4": "a100",
    "a100_sxm4_80gb": "a100",
    "a100_80gb": "a100",
    "h800_sxm": "h800",
    "h800_sxm5": "h800",
    "l40s_pcie": "l40s",
}

_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_.-]*")


class GPU(BaseModel):
    """One GPU, in canonical units (bytes, bytes/s, FLOP/s, watts).

    Frozen because a catalog entry is reference data: a planner that wants a what-if GPU should
    build a new one with ``model_copy(update=...)`` rather than mutate the shared entry.
    Bandwidths are per GPU and per direction; FLOP rates are dense peak (no sparsity).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    vendor: str = Field(min_length=1)
    architecture: str = Field(min_length=1)
    memory_sold_bytes: int = Field(gt=0)
    memory_visible_bytes: int = Field(gt=0)
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    dense_flops: dict[str, float]
    scale_up_domain_gpus: int = Field(gt=0)
    scale_up_bandwidth_bytes_per_s: float = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    nic_bandwidth_bytes_per_s: float = Field(gt=0)
    power_watts: float | None = Field(default=None, gt=0)  # None: not known (a measured CPU entry)

    @field_validator("dense_flops")
    @classmethod
    def _check_dense_flops(cls, value: dict[str, float]) -> dict[str, float]:
        """Keys must be canonical dtype names so :meth:`flops` lookups can't miss on spelling."""
        for dtype, rate in value.items():
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
            if not (math.isfinite(rate) and rate > 0):
                raise ValueError(f"rate for {dtype} must be a positive number, got {rate!r}")
        return value

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (aliases like ``bfloat16`` or ``nvfp4`` accepted).

        Raises rather than returning 0 for a dtype the GPU lacks, because a silent zero would turn
        into an infinite step time several layers up, far from the cause.
        """
        key = _canonical_dtype(dtype)
        rate = self.dense_flops.get(key)
        if rate is None:
            have = ", ".join(sorted(self.dense_flops))
            shown = dtype if key == dtype.strip().lower() else f"{dtype} (= {key})"
            raise TokenmillError(f"GPU {self.name!r} has no dense {shown} tensor-core rate; it has: {have}")
        return rate

    @property
    def memory_visible_gib(self) -> float:
        """Driver-visible memory in GiB, the number nvidia-smi users recognise (268.6 on B300)."""
        return self.memory_visible_bytes / GiB


def _canonical_dtype(dtype: str) -> str:
    key = dtype.strip().lower()
    return DTYPE_ALIASES.get(key, key)


# --------------------------------------------------------------------------------------------
# TOML schema and validation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """Expected shape of one leaf key; ``unit`` goes into error messages so users can fix them."""

    kind: Literal["str", "name", "int", "number"]
    unit: str = ""
    required: bool = True
    #: a bound ~1,000 × any GPU made: a typo of a few zeros is an error, not a GPU whose pools
    #: overflow the arithmetic (memory_sold_gb = 1e300 did)
    maximum: float | None = None

    def expected(self) -> str:
        base = {
            "str": "a non-empty string",
            "name": "a lower-case name (letters, digits, '_', '-', '.')",
            "int": "a positive integer",
            "number": "a positive number",
        }[self.kind]
        if self.maximum is not None:
            base += f" up to {self.maximum:,.0f}"
        return f"{base} ({self.unit})" if self.unit else base


_Schema: TypeAlias = dict[str, "_Field | _Schema"]

_SCHEMA: Final[_Schema] = {
    "name": _Field("name", "catalog key"),
    "display_name": _Field("str"),
    "vendor": _Field("str"),
    "architecture": _Field("str"),
    "memory_sold_gb": _Field("number", "decimal GB, as marketed", maximum=1e5),
    "memory_visible_mib": _Field("int", "MiB, as nvidia-smi reports", maximum=1e8),
    "hbm_bandwidth_tb_s": _Field("number", "decimal TB/s", maximum=1e4),
    # bf16 is required: it is the default compute dtype every planner path needs, and every GPU
    # worth planning for (A100 onwards, MI200 onwards) has it. The rest may be omitted when the
    # GPU has no tensor-core path for them.
    "dense_tflops": {
        dtype: _Field("number", "dense TFLOP/s", required=dtype == "bf16", maximum=1e7) for dtype in DTYPES
    },
    "scale_up": {
        "domain_gpus": _Field("int", "GPUs in one NVLink / Infinity Fabric domain", maximum=1e5),
        "bandwidth_gb_s": _Field("number", "decimal GB/s per GPU per direction", maximum=1e6),
    },
    "node": {
        "gpus_per_node": _Field("int", "GPUs per node", maximum=1e4),
        "nic_gb_s": _Field("number", "decimal GB/s per GPU per direction", maximum=1e6),
    },
    "power": {
        "tdp_w": _Field("number", "watts", maximum=1e6),
    },
}

#: Tables a file may leave out: a machine measured by ``tokenmill calibrate local`` has no datasheet TDP.
_OPTIONAL_TABLES: Final = frozenset({"power"})


def _describe(value: object) -> str:
    """A short one-line rendering of a bad value for an error message."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    if isinstance(value, str):
        return f"string {text}"
    return text


def _check_leaf(field: _Field, value: object, key: str, source: str) -> None:
    def bad() -> TokenmillError:
        return TokenmillError(f"{source}: key '{key}' must be {field.expected()}, got {_describe(value)}")

    if field.kind in ("str", "name"):
        if not isinstance(value, str) or not value.strip():
            raise bad()
        if field.kind == "name" and not _NAME_RE.fullmatch(value):
            raise bad()
    elif field.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise bad()
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad()
        if not (math.isfinite(value) and value > 0):
            raise bad()
    if field.maximum is not None and isinstance(value, int | float) and value > field.maximum:
        raise bad()


def _validate(table: Mapping[str, Any], schema: _Schema, prefix: str, source: str) -> None:
    """Check ``table`` against ``schema`` recursively; first problem wins, reported on one line.

    Unknown keys are checked first so a misspelt key is reported as the typo it is, not as the
    correctly spelt key being missing.
    """
    for key in table:
        if key not in schema:
            allowed = ", ".join(sorted(schema))
            raise TokenmillError(f"{source}: unknown key '{prefix}{key}'; expected one of: {allowed}")
    for key, spec in schema.items():
        dotted = f"{prefix}{key}"
        if key not in table:
            if isinstance(spec, dict):
                if not prefix and key in _OPTIONAL_TABLES:
                    continue
                raise TokenmillError(f"{source}: missing table '[{dotted}]'")
            if spec.required:
                raise TokenmillError(f"{source}: missing key '{dotted}' (expected {spec.expected()})")
            continue
        value = table[key]
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise TokenmillError(f"{source}: key '{dotted}' must be a table, got {_describe(value)}")
            _validate(value, spec, f"{dotted}.", source)
        else:
            _check_leaf(spec, value, dotted, source)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parse_gpu_toml(text: str, source: str) -> GPU:
    """Parse and validate one GPU file, converting source units to canonical ones.

    ``source`` (a file name or path) is only used in messages. Every problem is a one-line
    :class:`TokenmillError` naming the file and the dotted key, because the CLI prints it verbatim
    and a pydantic multi-line dump would bury the one thing the user has to fix.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenmillError(f"{source}: invalid TOML: {_one_line(str(exc))}") from None
    _validate(data, _SCHEMA, "", source)

    tflops: dict[str, Any] = data["dense_tflops"]
    try:
        return GPU(
            name=data["name"],
            display_name=data["display_name"],
            vendor=data["vendor"],
            architecture=data["architecture"],
            memory_sold_bytes=round(data["memory_sold_gb"] * GB),
            memory_visible_bytes=data["memory_visible_mib"] * MiB,
            hbm_bandwidth_bytes_per_s=float(data["hbm_bandwidth_tb_s"] * TB),
            dense_flops={dtype: float(rate * _TFLOPS) for dtype, rate in tflops.items()},
            scale_up_domain_gpus=data["scale_up"]["domain_gpus"],
            scale_up_bandwidth_bytes_per_s=float(data["scale_up"]["bandwidth_gb_s"] * GB),
            gpus_per_node=data["node"]["gpus_per_node"],
            nic_bandwidth_bytes_per_s=float(data["node"]["nic_gb_s"] * GB),
            power_watts=float(data["power"]["tdp_w"]) if "power" in data else None,
        )
    except ValidationError as exc:  # pragma: no cover - the schema check above should catch all
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        raise TokenmillError(f"{source}: invalid value for '{loc}': {_one_line(first['msg'])}") from None


# --------------------------------------------------------------------------------------------
# Bundled catalog
# --------------------------------------------------------------------------------------------


def _gpu_dir() -> Traversable:
    """The bundled data folder, found via importlib.resources so it works from a wheel or zip."""
    return files("tokenmill.hardware") / "gpus"


def known_gpu_names() -> list[str]:
    """Catalog keys of the bundled GPUs, sorted (the file stems under ``gpus/``)."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in _gpu_dir().iterdir()
        if entry.is_file() and entry.name.endswith(".toml")
    )


def _load_bundled(key: str) -> GPU:
    entry = _gpu_dir() / f"{key}.toml"
    source = f"tokenmill/hardware/gpus/{key}.toml"
    gpu = parse_gpu_toml(entry.read_text(encoding="utf-8"), source)
    if gpu.name != key:
        # A renamed file would otherwise be reachable under one name and report another.
        raise TokenmillError(f"{source}: key 'name' is {gpu.name!r} but the file is named {key}.toml")
    return gpu


def _looks_like_path(name: str) -> bool:
    return name.endswith(".toml") or "/" in name or "\\" in name


def load_gpu(name: str) -> GPU:
    """Look up a GPU by catalog name, alias, or path to a user ``.toml`` file.

    Names are case-insensitive and ``-`` equals ``_``, so ``B300``, ``b300_sxm`` and ``h200-sxm``
    all work; this lets the calibration CSV's system names be passed straight through. Anything
    ending in ``.toml`` or containing a path separator is read as a file in the catalog format.
    """
    if _looks_like_path(name):
        path = Path(name).expanduser()
        try:
            text = path.read_text(encoding="utf-8-sig")  # TOML is UTF-8; an editor's BOM is not content
        except FileNotFoundError:
            raise TokenmillError(f"GPU file '{name}' not found") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL byte in the name
            raise TokenmillError(f"cannot read GPU file {name!r}: {_one_line(str(exc))}") from None
        return parse_gpu_toml(text, str(path))

    known = known_gpu_names()
    key = re.sub(r"[\s-]+", "_", name.strip().lower())
    key = _GPU_ALIASES.get(key, key)
    if key in known:
        return _load_bundled(key)
    for stem in dict.fromkeys((name.strip().lower(), key)):  # as written (my-box), then normalised
        local = user_hardware_dir() / f"{stem}.toml"
        if _NAME_RE.fullmatch(stem) and path_is_file(local):
            return parse_gpu_toml(local.read_text(encoding="utf-8-sig"), str(local))
    measured = local_hardware_names()
    hint = f"; measured here: {', '.join(measured)}" if measured else ""
    how = " (`tokenmill calibrate local` measures this machine as `cpu`)" if key == "cpu" else ""
    raise TokenmillError(f"unknown GPU {name!r}{how}; known: {', '.join(known)}{hint} (or a path to a .toml file)")


def local_hardware_names() -> list[str]:
    """Entries measured on this machine (``tokenmill calibrate local``), sorted."""
    folder = user_hardware_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.toml") if _NAME_RE.fullmatch(p.stem))


def list_gpus(include_local: bool = False) -> list[GPU]:
    """Every bundled GPU, sorted by name (then, with ``include_local``, the entries measured here)."""
    gpus = [_load_bundled(key) for key in known_gpu_names()]
    if include_local:
        gpus += [load_gpu(key) for key in local_hardware_names() if key not in known_gpu_names()]
    return gpus


# --------------------------------------------------------------------------------------------
# Display
# --------------------------------------------------------------------------------------------

#: Column headers of :func:`gpu_table_rows`, in display order; each header carries its unit.
GPU_TABLE_COLUMNS: Final[tuple[str, ...]] = (
    "GPU",
    "sold (GB)",
    "visible (GiB)",
    "HBM (TB/s)",
    "BF16 (TFLOP/s)",
    "FP8 (TFLOP/s)",
    "FP4 (TFLOP/s)",
    "scale-up GPUs",
    "scale-up (GB/s)",
    "GPUs/node",
    "NIC (GB/s)",
    "power (W)",
)


def _num(value: float) -> str:
    """Shortest faithful rendering: ``989``, ``3.35``, ``537.6`` (no trailing zeros)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text if text != "-0" else "0"


def _tflops(gpu: GPU, dtype: str) -> str:
    rate = gpu.dense_flops.get(dtype)
    return "-" if rate is None else _num(rate / _TFLOPS)


def gpu_table_rows(gpus: Iterable[GPU]) -> list[dict[str, str]]:
    """Rows for ``tokenmill gpus``: strings already in display units, keyed by GPU_TABLE_COLUMNS.

    Formatting lives here rather than in the CLI so every front end (rich table, markdown, tests)
    shows the same numbers. A dtype the GPU lacks shows as ``-``.
    """
    rows: list[dict[str, str]] = []
    for gpu in gpus:
        values = (
            gpu.name,
            _num(gpu.memory_sold_bytes / GB),
            f"{gpu.memory_visible_gib:.1f}",
            _num(gpu.hbm_bandwidth_bytes_per_s / TB),
            _tflops(gpu, "bf16"),
            _tflops(gpu, "fp8"),
            _tflops(gpu, "fp4"),
            str(gpu.scale_up_domain_gpus),
            _num(gpu.scale_up_bandwidth_bytes_per_s / GB),
            str(gpu.gpus_per_node),
            _num(gpu.nic_bandwidth_bytes_per_s / GB),
            "-" if gpu.power_watts is None else _num(gpu.power_watts),
        )
        rows.append(dict(zip(GPU_TABLE_COLUMNS, values, strict=True)))
    return rows
