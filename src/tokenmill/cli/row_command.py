"""A measured row as the ``tokenmill predict`` command that predicts the deployment it records.

Why: a row of a measurements file is a deployment and a benchmark point. ``calibrate evaluate``
predicts it; ``predict`` is where an engineer asks what the row cannot (``--set`` on a constant,
``--compare`` another layout, a longer prompt, a figure). The rules that read a row
(``perf.measurements``: its GPUs, parallel sizes, formats, the engines' memory share, no prefix
cache, an FP8 KV cache for FP8/FP4 rows) are spelled here as ``predict``'s flags, once, so the
two paths give the same TTFT and TPOT (``tests/test_cli_row_command.py`` runs the commands).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf.measurements import RowSpec
from tokenmill.plan.layout import Layout

#: The row's (gemm_quant_mode, moe_quant_mode) pairs whose model ``--weight-format`` builds:
#: one format for both, or FP8 GEMMs with block-scaled FP8 experts (``spec.requantize`` writes
#: the same block-FP8 config for ``fp8_block`` alone). Other pairs have no flag.
_MIXED_FORMATS = {("fp8", "fp8_block"): "fp8_block", ("fp8_block", "fp8"): "fp8_block"}


def weight_format_flag(gemm_mode: str, moe_mode: str) -> list[str]:
    """``--weight-format`` for a row's two format cells ([] for the checkpoint's own)."""
    if not gemm_mode and not moe_mode:
        return []
    if gemm_mode == moe_mode:
        return ["--weight-format", gemm_mode]
    fmt = _MIXED_FORMATS.get((gemm_mode, moe_mode))
    if fmt is None:
        raise TokenmillError(
            f"no predict flags build gemm_quant_mode {gemm_mode or '(empty)'!r} with "
            f"moe_quant_mode {moe_mode or '(empty)'!r} (--weight-format sets both)"
        )
    return ["--weight-format", fmt]


def _sizes(layout: Layout) -> list[tuple[str, str]]:
    """The worker's parallel sizes as (key, value), tp always, the rest where not the default."""
    out = [("tp", str(layout.tp))]
    out += [
        (k, str(v)) for k, v in (("ep", layout.ep), ("pp", layout.pp), ("dp-attention", layout.dp_attention)) if v > 1
    ]
    if layout.moe_a2a_backend != "none":
        out.append(("moe-a2a-backend", layout.moe_a2a_backend))
    return out


def _decode_layout(layout: Layout) -> str:
    """``--decode-layout``: every size the decode worker would otherwise inherit from the prefill's."""
    items = {"tp": str(layout.tp), "ep": str(layout.ep), "pp": str(layout.pp)}
    items["dp-attention"] = str(layout.dp_attention)
    items["moe-a2a-backend"] = layout.moe_a2a_backend
    return ",".join(f"{k}={v}" for k, v in items.items())


def predict_argv(spec: RowSpec, overrides: Sequence[str] = ()) -> list[str]:
    """``predict``'s arguments for the row (without the program's name), each of ``overrides`` as
    a ``--set``, or a one-line error for a row whose formats no flag builds."""
    worker = spec.agg if spec.agg is not None else spec.prefill
    assert worker is not None
    layout = worker.layout
    argv = ["predict", "--model", str(spec.config_path), "--gpu", load_gpu(spec.system).name]
    argv += ["--gpus", str(layout.gpus_per_worker)]
    for key, value in _sizes(layout):
        argv += [f"--{key}", value]
    argv += ["--kv-cache-dtype", layout.kv_cache_dtype.value, "--prefix-cache", layout.prefix_cache.value]
    argv += ["--mem-fraction-static", f"{layout.mem_fraction_static:g}"]
    if layout.max_running_requests is not None:  # a recorded row's own cap (``calibrate record``)
        argv += ["--max-running-requests", str(layout.max_running_requests)]
    argv += weight_format_flag(spec.gemm_mode, spec.moe_mode)
    if spec.decode is not None:
        argv += ["--prefill-workers", str(worker.workers), "--decode-workers", str(spec.decode.workers)]
        argv += ["--decode-gpus", str(spec.decode.layout.gpus_per_worker)]
        argv += ["--decode-layout", _decode_layout(spec.decode.layout)]
    argv += ["--backend", spec.backend]
    if spec.version:
        argv += ["--backend-version", spec.version]
    argv += ["--isl", str(spec.isl), "--osl", str(spec.osl), "--concurrency", str(spec.concurrency)]
    for item in overrides:
        argv += ["--set", item]
    return argv


def predict_command(spec: RowSpec, overrides: Sequence[str] = ()) -> str:
    """The row as one shell line: ``tokenmill predict …``."""
    return shlex.join(["tokenmill", *predict_argv(spec, overrides)])
