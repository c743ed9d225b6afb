"""Measured serving results (``serving_measurements.csv``) read into what the replay needs.

Each CSV row is one benchmark point of a real deployment: fixed-length random prompts sent in a
closed loop at a concurrency C. :func:`interpret` turns a row into a :class:`RowSpec` (model,
GPU, engine, per-role layouts, ISL, OSL, C) or a :class:`Skip` with the reason. Conventions and
assumptions, each reported on the rows it touches:

- **Parallel sizes** follow the collector's convention: ``tp_size`` is the attention-TP size of one
  attention-DP rank, a worker has tp × attention_dp × pp GPUs, and moe_tp × moe_ep splits the same
  GPUs for the experts. In tokenmill's (SGLang's) terms: ``Layout(tp = tp·dp, dp_attention = dp,
  ep = moe_ep, pp)``. An empty or 0 size means 1. Expert parallelism together with attention DP
  runs the experts with an all-to-all dispatch (DeepEP / TRT-LLM wide EP).
- **Repair (product encoding).** On 8-GPU systems (HGX H100/H200/B200/B300) some aggregated rows
  give a worker wider than the node where the sizes are the square of one number: tp = n² with
  moe_tp = moe_ep = n (or dp = n² likewise, or tp = dp = n with moe_ep = n²). That is "TP n with
  EP n" written as a product (the rows' ids name n); such rows are read as n GPUs and flagged
  ``repaired``. Other agg workers wider than an 8-GPU node are skipped as broken.
- **Concurrency** is the ``silicon_concurrency`` in ``silicon_data_source`` (the only thing read
  from it); without it, batch_size × attention DP. batch_size is per worker (× attention DP: per
  rank) in the 2,953 aggregated rows where the two agree, and per GPU in 21 TRT-LLM 1.3.0rc rows
  (silicon_concurrency = batch_size × the worker's GPUs): those are one worker with the
  benchmark's lanes, and say so. A row whose silicon_concurrency exceeds batch_size × DP by any
  other factor (8 rows: Qwen3-32B-NVFP4 at 15k prompts, 416 = 13 × 32 on TP 2 workers) ran
  several workers behind one benchmark, how many the file does not say, and is skipped with that
  reason; where batch_size × DP exceeds it (one row, DP 64) the benchmark's concurrency stands.
- **Formats.** The row's ``gemm_quant_mode``/``moe_quant_mode`` set the weight formats: fp8 and
  fp8_block → FP8 (128×128 blocks for fp8_block), nvfp4 → NVFP4; empty → the checkpoint's own.
  A checkpoint already stored at the width the row names (DeepSeek's FP8, gpt-oss's MXFP4) is
  kept as stored. The KV cache is taken as FP8 for fp8/fp4 rows and BF16 otherwise (the engines'
  setting in these recipes; the CSV does not say); a ``precision`` outside bf16, fp16, fp8, fp4,
  nvfp4, mxfp4 or empty skips the row.
- **Models** are found in ``--models-dir`` as ``<org>--<name>_config.json``; failing that, by the
  name with the organisation, a ``Meta-`` prefix and ``-Instruct``/``-FP8``/``-NVFP4``/``-FP4``
  suffixes removed (``nvidia/Llama-3.1-8B-Instruct-FP8`` → ``meta-llama--Meta-Llama-3.1-8B``).
  Instruct and base models share an architecture. No match: the row is skipped.
- **Cells.** ISL, OSL and the concurrency must be positive integers and the parallel sizes whole
  numbers (empty or 0 means 1); anything else (text, fractions, negatives, ``inf``, ``nan``)
  skips the row with the column and the value named, as does an unknown weight format. A measured
  TTFT or TPOT that is not a finite positive number counts as not measured, and the row's notes
  say so.
- **The file** is UTF-8, with or without a spreadsheet's byte-order mark; quoted cells may hold
  commas and line breaks.
- **Disaggregated rows without batch sizes** (the collector did not record them) are predicted
  assuming one prefill worker and one decode worker of the given layouts, the decode worker
  holding all C requests; they are reported apart (``fully_specified = False``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU, load_gpu
from tokenmill.hardware.engines import ENGINES, check_engine_runs_on
from tokenmill.jsonfile import read_json_object
from tokenmill.paths import path_exists
from tokenmill.plan.layout import KVDtype, Layout, PrefixCache
from tokenmill.spec.loader import model_from_config
from tokenmill.spec.model import ModelSpec
from tokenmill.spec.requantize import WEIGHT_FORMATS, requantize

#: Columns a measurements file must have (silicon columns are optional: then we only predict).
REQUIRED_COLUMNS = ("id", "backend", "model_path", "system", "mode", "isl", "osl")
SILICON_COLUMNS = ("silicon_ttft_ms", "silicon_tpot_ms")
BACKENDS = ENGINES
#: Key :func:`read_measurements` adds to a row whose line does not match the header
MALFORMED = "_malformed"
#: Weight formats a ``gemm_quant_mode``/``moe_quant_mode`` cell may name ("" = the checkpoint's own)
QUANT_MODES = ("", *WEIGHT_FORMATS)
#: ``precision`` cells and whether the row's KV cache is taken as FP8 ("" = not recorded: BF16)
PRECISIONS = {"": False, "bf16": False, "fp16": False, "fp8": True, "fp4": True, "nvfp4": True, "mxfp4": True}
#: Share of GPU memory the benchmarked engines give weights and caches (vLLM
#: ``--gpu-memory-utilization``, TRT-LLM's free-memory fraction and the recipes' SGLang
#: ``--mem-fraction-static`` are set high in these sweeps; 4×B200 DeepSeek-R1 FP8 needs it).
ENGINE_MEM_FRACTION = 0.95

#: Columns beyond the calibration file's, which ``calibrate record`` writes for a deployment measured
#: with other settings than the sweeps' (each empty or absent: the reading above).
SETTING_COLUMNS = ("kv_cache_dtype", "mem_fraction_static", "prefix_cache", "max_running_requests")

_CONC = re.compile(r"silicon_concurrency=(\d+)")
_QUANT_SUFFIX = re.compile(r"-(instruct|fp8|nvfp4|fp4|bf16)$")


@dataclass(frozen=True)
class Role:
    """One kind of worker of a deployment."""

    layout: Layout
    workers: int = 1
    batch: int | None = None  # requests per attention-DP rank, as recorded

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_worker * self.workers


@dataclass(frozen=True)
class RowSpec:
    id: str
    backend: str
    system: str
    model_path: str
    config_path: Path
    gemm_mode: str
    moe_mode: str
    mode: str  # agg | disagg
    isl: int
    osl: int
    concurrency: int
    agg: Role | None = None
    prefill: Role | None = None
    decode: Role | None = None
    fully_specified: bool = True
    notes: tuple[str, ...] = ()
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    version: str = ""  # backend_version ("" when the row does not say)

    @property
    def gpus(self) -> int:
        if self.agg is not None:
            return self.agg.gpus
        assert self.prefill is not None and self.decode is not None
        return self.prefill.gpus + self.decode.gpus

    @property
    def has_silicon(self) -> bool:
        return self.ttft_ms is not None and self.tpot_ms is not None


@dataclass(frozen=True)
class Skip:
    id: str
    reason: str
    row: dict[str, str] = field(default_factory=dict)


def read_measurements(path: Path | str) -> tuple[list[dict[str, str]], bool]:
    """Rows of a measurements CSV, and whether it has the silicon (measured) columns."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first column
    except OSError as exc:
        raise TokenmillError(f"--measurements: cannot read {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TokenmillError(f"--measurements {p}: not a UTF-8 CSV file (byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))  # quoted cells may hold line breaks
    cols = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise TokenmillError(f"--measurements {p}: missing column(s) {', '.join(missing)}")
    rows: list[dict[str, str]] = []
    first_line: dict[str, int] = {}  # id → the line it first appeared on
    for record in reader:
        row = _cells(record, len(cols))
        rid, line = (row.get("id") or "").strip(), reader.line_num
        if not rid:
            raise TokenmillError(f"--measurements {p}: line {line}: the id is empty (predictions are named by it)")
        if rid in first_line:
            raise TokenmillError(
                f"--measurements {p}: line {line}: id {rid!r} repeats line {first_line[rid]} (ids must be unique)"
            )
        first_line[rid] = line
        rows.append(row)
    if not rows:
        raise TokenmillError(f"--measurements {p}: a header and no rows (nothing to predict)")
    return rows, all(c in cols for c in SILICON_COLUMNS)


def _cells(record: dict[str | None, Any], columns: int) -> dict[str, str]:
    """A CSV record as text cells; a line with more or fewer fields than the header is marked
    (``MALFORMED``) so that :func:`interpret` skips it with the count instead of guessing."""
    row = {k: v if isinstance(v, str) else "" for k, v in record.items() if k is not None}
    extra = record.get(None)
    given = sum(v is not None for k, v in record.items() if k is not None) + (len(extra) if extra else 0)
    if given != columns:
        row[MALFORMED] = f"{given} fields where the header has {columns}"
    return row


def _number(row: dict[str, str], key: str) -> float | None:
    """The cell as a finite positive number, else None (empty, text, 0, negative, inf, nan)."""
    value = (row.get(key) or "").strip()
    if not value:
        return None
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) and x > 0 else None


def _int(row: dict[str, str], key: str) -> int | None:
    """The cell as a positive whole number ("1024" or "1024.0"), else None: a fraction such as
    "1024.5" is refused, not truncated."""
    x = _number(row, key)
    return int(x) if x is not None and x >= 1 and x.is_integer() else None


#: A role's size columns (``prefill_``/``decode_`` prefixed for disaggregated rows)
SIZE_COLUMNS = ("tp_size", "attention_dp_size", "pp_size", "moe_tp_size", "moe_ep_size", "num_workers", "batch_size")


def _sizes(row: dict[str, str], prefix: str) -> tuple[dict[str, int | None], str]:
    """A role's sizes read once: each an int, None when empty or 0 (the collector's "not set"),
    or the reason a cell is unusable (text, a fraction, a negative, inf, nan)."""
    out: dict[str, int | None] = {}
    for col in SIZE_COLUMNS:
        key = prefix + col
        raw = (row.get(key) or "").strip()
        try:
            x = float(raw) if raw else 0.0
        except ValueError:
            x = math.nan
        if x == 0:
            out[col] = None
        elif math.isfinite(x) and x >= 1 and x.is_integer():
            out[col] = int(x)
        else:
            return {}, f"{key} {raw!r} is not a positive whole number (empty or 0 means 1)"
    return out, ""


def _not_positive(row: dict[str, str], key: str) -> str:
    """Why a required positive integer cell was refused."""
    raw = (row.get(key) or "").strip()
    return f"{key} missing" if not raw else f"{key} {raw!r} is not a positive integer"


def _norm_name(name: str) -> str:
    n = name.lower()
    if n.startswith("meta-"):
        n = n[5:]
    while True:
        m = _QUANT_SUFFIX.search(n)
        if not m:
            return n
        n = n[: m.start()]


@lru_cache(maxsize=64)
def _dir_index(models_dir: str) -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for f in sorted(Path(models_dir).glob("*_config.json")):
        name = f.name.removesuffix("_config.json").split("--", 1)[-1]
        index.setdefault(_norm_name(name), []).append(f.name)
    return {k: tuple(v) for k, v in index.items()}


def find_config(model_path: str, models_dir: Path | str) -> tuple[Path | None, str | None]:
    """The config file for a Hugging Face id, and a note when found by the relaxed name rule."""
    d = Path(models_dir)
    exact = d / (model_path.replace("/", "--") + "_config.json")
    if path_exists(exact):
        return exact, None
    name = model_path.split("/", 1)[-1]
    hits = _dir_index(str(d)).get(_norm_name(name), ())
    if len(hits) == 1:
        return d / hits[0], f"model {model_path} read from {hits[0]} (same architecture)"
    return None, None


def row_concurrency(row: dict[str, str]) -> int | None:
    m = _CONC.search(row.get("silicon_data_source") or "")
    return int(m.group(1)) if m else None


def _role(row: dict[str, str], prefix: str, kv: KVDtype, gpu: GPU, mode: str) -> tuple[Role | None, str | None, str]:
    """(role, note, skip reason) of one role's columns (``prefix`` '' for agg rows)."""
    sizes, bad = _sizes(row, prefix)
    if bad:
        return None, None, bad
    tp = sizes["tp_size"] or 1
    dp = sizes["attention_dp_size"] or 1
    pp = sizes["pp_size"] or 1
    mtp = sizes["moe_tp_size"]
    mep = sizes["moe_ep_size"]
    note = None
    orig = (tp, dp, mtp, mep)
    width = tp * dp
    if mode == "agg" and width * pp > gpu.gpus_per_node and gpu.scale_up_domain_gpus <= gpu.gpus_per_node:
        n = None
        if mtp is not None and mtp == mep and width == mtp * mep and (dp == 1 or tp == 1):
            n = mtp
            tp, dp = (n, 1) if dp == 1 else (1, n)
        elif tp == dp and mep is not None and mtp in (None, 1) and mep == tp * dp:
            n = tp
            tp, dp = 1, n
        if n is None:
            return (
                None,
                None,
                (
                    f"broken layout: an aggregated worker of tp {tp} × dp {dp} × pp {pp} GPUs is wider than the "
                    f"{gpu.gpus_per_node}-GPU node of {gpu.name}"
                ),
            )
        note = f"repaired: tp {orig[0]} × dp {orig[1]} (moe_tp {orig[2]} × moe_ep {orig[3]}) read as {n} GPUs"
        mtp, mep = 1, n
        width = tp * dp
    ep = mep or 1
    if mtp is not None and mep is not None and mtp * mep != width:
        if mtp * mep == 1:
            ep = 1  # dense model or experts replicated; sizes not recorded
        else:
            return None, None, f"inconsistent sizes: moe_tp {mtp} × moe_ep {mep} ≠ tp {tp} × dp {dp}"
    if ep > width:
        return None, None, f"inconsistent sizes: moe_ep {ep} > tp {tp} × dp {dp}"
    a2a = "deepep" if (ep > 1 and dp > 1) else "none"
    layout = Layout(
        tp=width,
        ep=ep,
        pp=pp,
        dp_attention=dp,
        kv_cache_dtype=kv,
        prefix_cache=PrefixCache.OFF,
        moe_a2a_backend=a2a,
        mem_fraction_static=ENGINE_MEM_FRACTION,
    )
    layout, bad = _settings(row, layout)
    if bad:
        return None, None, bad
    workers = (sizes["num_workers"] or 1) if prefix else 1
    batch = sizes["batch_size"]
    return Role(layout, workers, batch), note, ""


def _settings(row: dict[str, str], layout: Layout) -> tuple[Layout, str]:
    """``layout`` with the row's own engine settings (``SETTING_COLUMNS``) where it gives them, or
    the skip reason naming the column whose value cannot be read."""
    changes: dict[str, Any] = {}
    cells = {col: (row.get(col) or "").strip() for col in SETTING_COLUMNS}
    if cells["kv_cache_dtype"]:
        try:
            changes["kv_cache_dtype"] = KVDtype.parse(cells["kv_cache_dtype"])
        except TokenmillError:
            return layout, f"kv_cache_dtype {cells['kv_cache_dtype']!r} is not one of auto, bf16, fp8_e4m3"
    if cells["prefix_cache"]:
        try:
            changes["prefix_cache"] = PrefixCache(cells["prefix_cache"].lower())
        except ValueError:
            known = ", ".join(p.value for p in PrefixCache)
            return layout, f"prefix_cache {cells['prefix_cache']!r} is not one of {known}"
    if cells["mem_fraction_static"]:
        try:
            share = float(cells["mem_fraction_static"])
        except ValueError:
            share = math.nan
        if not 0 < share <= 1:
            return layout, f"mem_fraction_static {cells['mem_fraction_static']!r} is not a share in (0, 1]"
        changes["mem_fraction_static"] = share
    if cells["max_running_requests"]:
        cap = cells["max_running_requests"]
        if not (cap.isascii() and cap.isdigit()) or int(cap) < 1:
            return layout, f"max_running_requests {cap!r} is not a positive integer"
        changes["max_running_requests"] = int(cap)
    return (replace(layout, **changes) if changes else layout), ""


def _read_concurrency(row: dict[str, str], role: Role, conc: int) -> tuple[str | None, str]:
    """(note, skip reason) for an aggregated row's benchmark concurrency read as one worker's lanes.

    batch_size is per worker (× attention DP, per rank) where it agrees with the concurrency, and
    per GPU in some TRT-LLM rows (concurrency = batch_size × the worker's GPUs: one worker, noted);
    any other excess means workers the file does not count (a skip reason). The row's own DP is
    used, not a repaired layout's (dp = 64 read as 8 GPUs keeps batch_size × 64)."""
    sizes, _ = _sizes(row, "")
    batch = role.batch or 0
    per_worker = batch * (sizes["attention_dp_size"] or 1)
    gpus = role.layout.tp * role.layout.pp
    if conc <= per_worker:
        return None, ""
    if conc == batch * gpus:
        return f"batch_size is per GPU: silicon_concurrency={conc} = {batch} × {gpus} GPUs", ""
    return None, (
        f"silicon_concurrency={conc} is neither batch_size × attention DP ({per_worker}) nor "
        f"batch_size × the worker's {gpus} GPUs ({batch * gpus}): how many workers shared "
        "the benchmark is not recorded"
    )


def interpret(row: dict[str, str], models_dir: Path | str) -> RowSpec | Skip:
    """A CSV row as a replayable benchmark point, or the reason it cannot be one."""
    rid = (row.get("id") or "").strip() or "?"
    if row.get(MALFORMED):
        return Skip(rid, f"malformed line: {row[MALFORMED]}", row)
    backend = (row.get("backend") or "").strip().lower()
    if backend not in BACKENDS:
        return Skip(rid, f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})", row)
    system = (row.get("system") or "").strip()
    try:
        gpu = load_gpu(system)
    except TokenmillError:
        return Skip(rid, f"unknown system {system!r}", row)
    try:
        check_engine_runs_on(backend, gpu)
    except TokenmillError as exc:
        return Skip(rid, str(exc), row)
    model_path = (row.get("model_path") or "").strip()
    if not model_path:
        return Skip(rid, "model_path missing", row)
    config, name_note = find_config(model_path, models_dir)
    if config is None:
        return Skip(rid, f"no config for model_path {model_path!r} in the models dir", row)
    isl, osl = _int(row, "isl"), _int(row, "osl")
    if isl is None or osl is None:
        return Skip(rid, _not_positive(row, "isl" if isl is None else "osl"), row)
    for col in ("gemm_quant_mode", "moe_quant_mode"):
        qmode = (row.get(col) or "").strip().lower()
        if qmode not in QUANT_MODES:
            known = ", ".join(q for q in QUANT_MODES if q)
            return Skip(rid, f"unknown {col} {qmode!r} (known: {known}, or empty for the checkpoint's own)", row)
    mode = (row.get("mode") or "").strip().lower()
    precision = (row.get("precision") or "").strip().lower()
    if precision not in PRECISIONS:
        known = ", ".join(q for q in PRECISIONS if q)
        return Skip(rid, f"unknown precision {precision!r} (known: {known}, or empty)", row)
    kv = KVDtype.FP8 if PRECISIONS[precision] else KVDtype.BF16
    notes: list[str] = [name_note] if name_note else []
    for col in SILICON_COLUMNS:
        raw = (row.get(col) or "").strip()
        if raw and _number(row, col) is None:
            notes.append(f"{col} {raw!r} is not a positive number: not scored")
    conc = row_concurrency(row)
    if conc is not None and conc < 1:
        return Skip(rid, f"silicon_concurrency={conc} in silicon_data_source is not a positive integer", row)
    common: dict[str, Any] = {
        "id": rid,
        "backend": backend,
        "system": system,
        "model_path": model_path,
        "config_path": config,
        "gemm_mode": (row.get("gemm_quant_mode") or "").strip().lower(),
        "moe_mode": (row.get("moe_quant_mode") or "").strip().lower(),
        "isl": isl,
        "osl": osl,
        "ttft_ms": _number(row, "silicon_ttft_ms"),
        "tpot_ms": _number(row, "silicon_tpot_ms"),
        "version": (row.get("backend_version") or "").strip(),
    }
    if mode == "agg":
        role, note, reason = _role(row, "", kv, gpu, mode)
        if role is None:
            return Skip(rid, reason, row)
        if note:
            notes.append(note)
        if conc is None:
            if role.batch is None:
                return Skip(rid, "no concurrency: neither silicon_concurrency nor batch_size", row)
            conc = role.batch * role.layout.dp_attention
            notes.append(f"concurrency {conc} = batch_size × attention DP (no silicon_concurrency)")
        elif role.batch is not None:
            conc_note, skip = _read_concurrency(row, role, conc)
            if skip:
                return Skip(rid, skip, row)
            if conc_note:
                notes.append(conc_note)
        return RowSpec(mode="agg", concurrency=conc, agg=role, notes=tuple(notes), **common)
    if mode == "disagg":
        pre, note_p, reason_p = _role(row, "prefill_", kv, gpu, mode)
        dec, note_d, reason_d = _role(row, "decode_", kv, gpu, mode)
        if pre is None or dec is None:
            return Skip(rid, (reason_p or reason_d), row)
        notes += [f"{role}: {n}" for role, n in (("prefill", note_p), ("decode", note_d)) if n]
        full = pre.batch is not None and dec.batch is not None and _int(row, "prefill_num_workers") is not None
        full = full and _int(row, "decode_num_workers") is not None
        if conc is None:
            if dec.batch is None:
                return Skip(rid, "no concurrency: neither silicon_concurrency nor decode_batch_size", row)
            conc = dec.batch * dec.layout.dp_attention * dec.workers
            notes.append(f"concurrency {conc} = decode batch × attention DP × workers (no silicon_concurrency)")
        if not full:
            notes.append("assumed: 1 prefill worker and 1 decode worker (batch sizes and worker counts not recorded)")
        return RowSpec(
            mode="disagg",
            concurrency=conc,
            prefill=pre,
            decode=dec,
            fully_specified=full,
            notes=tuple(notes),
            **common,
        )
    return Skip(rid, f"unknown mode {mode!r}", row)


# --- model specs with the row's formats -----------------------------------------------------


@lru_cache(maxsize=128)
def _raw_config(path: str) -> dict[str, Any]:
    """A config from ``--models-dir``, read once per run (or a one-line error naming the file)."""
    return read_json_object(path)


@lru_cache(maxsize=128)
def model_for_row(config_path: str, gemm_mode: str, moe_mode: str) -> ModelSpec:
    """The model spec of a row: its config with the row's weight formats applied (``spec.requantize``)."""
    # the cached config is shared: requantize copies it before any edit, and the parsers only read
    name = Path(config_path).name.removesuffix("_config.json")
    formats = requantize(_raw_config(config_path), gemm_mode, moe_mode)
    return model_from_config(formats.config, name, config_path, formats.expert_format)
