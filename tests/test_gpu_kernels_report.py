"""benchmarks/gpu_kernels.py: the smoke run on a CPU, and the report's fractions against figures
worked by hand (H200's datasheet: 989 TFLOP/s bf16, 1,979 fp8, 4.8 TB/s; the fitted constants
read from params.json here, not through the code that applies them)."""

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.cli_helpers import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
gk = load_benchmark("gpu_kernels")


def _run(command: str, **classes: Any) -> dict[str, Any]:
    """One measurement file as ``measure`` writes it, with these kernel classes."""
    return {"device": "test GPU", "torch": "x", "cuda": "y", "command": command, **classes}


SYNTHETIC = _run(
    "by hand",
    copy={"bytes_per_s": 4.2e12},
    weight_streaming=[
        {"m": 1, "n": 8, "k": 8, "weight_bytes_per_s": 2.4e12},
        {"m": 64, "n": 8, "k": 8, "weight_bytes_per_s": 3.6e12},
    ],
    dense_gemm=[{"m": 512, "n": 8, "k": 8, "flop_per_s": 494.5e12}],
    fp8_gemm={"error": "RuntimeError: not on this build"},
    launch={"kernels": 10, "eager_s_per_kernel": 8e-6, "graph_s_per_kernel": 1.25e-6},
    moe_grouped_gemm=[
        {"tokens_per_expert": 64, "n": 8, "k": 8, "flop_per_s": 100e12},  # under 256 rows: not counted
        {"tokens_per_expert": 256, "n": 8, "k": 8, "flop_per_s": 593.4e12},
        {"tokens_per_expert": 1024, "n": 8, "k": 8, "error": "refused"},
    ],
)


def _fitted(gpu: str, backend: str, *fields: str) -> float:
    data = json.loads((ROOT / "src/tokenmill/perf/calibrated/params.json").read_text())
    value = 1.0
    for f in fields:
        group = next(g for g in (data["gpus"][gpu], data["backends"][backend], data["global"]) if f in g)
        value *= group[f]
    return float(value)


def test_the_report_puts_each_measured_fraction_beside_the_fitted_ones() -> None:
    rows = {r.split(" | ")[0].lstrip("| "): r for r in gk.report(SYNTHETIC, "h200").splitlines() if r.startswith("| ")}
    assert rows["device copy (read + write)"].split(" | ")[1] == "0.88"  # 4.2 / 4.8 = 0.875
    streaming = rows["weights streamed by decode GEMMs (1–256 rows), of HBM"].split(" | ")
    assert streaming[1] == "0.50 – 0.75"  # 2.4 and 3.6 TB/s of 4.8
    wb = _fitted("h200", "sglang", "weight_bandwidth_efficiency")
    assert streaming[2].rstrip(" |") == " / ".join([f"{wb:.2f}"] * 3)  # one value for every engine
    dense = rows["dense bf16 GEMM (512–16,384 rows), of bf16 peak"].split(" | ")
    assert dense[1] == "0.50"  # 494.5 of 989
    assert dense[2].rstrip(" |") == " / ".join(
        f"{_fitted('h200', b, 'matmul_efficiency', 'compute_scale'):.2f}" for b in ("sglang", "vllm", "trtllm")
    )
    assert rows["dense fp8 GEMM (512–16,384 rows), of fp8 peak"].split(" | ")[1] == "not measured"
    assert rows["grouped MoE GEMM, bf16, ≥ 256 rows per expert, of bf16 peak"].split(" | ")[1] == "0.60"  # 593.4/989
    assert rows["prefill attention, causal, 1k–16k tokens, of bf16 peak"].split(" | ")[1] == "not measured"
    launch = next(r for name, r in rows.items() if name.startswith("kernel launch"))
    assert "8.00 from Python, 1.25 in a CUDA graph" in launch
    per_layer = " / ".join(
        f"{_fitted('h200', b, 'decode_layer_overhead_s', 'overhead_scale') * 1e6:.1f}"
        for b in ("sglang", "vllm", "trtllm")
    )
    assert launch.endswith(f"per decode layer, µs: {per_layer} |")


def test_the_smoke_run_measures_every_class_on_a_cpu(tmp_path: Path) -> None:
    data = gk.measure(torch.device("cpu"), smoke=True, iters=2)
    for name in ("copy", "weight_streaming", "dense_gemm", "moe_grouped_gemm", "prefill_attention", "launch"):
        assert "error" not in data[name], data[name]
    assert data["weight_streaming"][0]["weight_bytes_per_s"] > 0
    assert "not measured" not in gk.report(data, "h200").split("dense bf16 GEMM")[1].splitlines()[0]
    pytest.importorskip("matplotlib")
    gk.figure(data, "h200", [tmp_path / "k.png"])
    assert (tmp_path / "k.png").stat().st_size > 10_000


def test_several_runs_pool_their_shapes_and_a_failed_class_adds_nothing() -> None:
    second = _run(
        "again",
        copy={"bytes_per_s": 4.32e12},
        dense_gemm=[{"m": 512, "n": 8, "k": 8, "flop_per_s": 692.3e12}],
        weight_streaming={"error": "OutOfMemoryError"},
        moe_grouped_gemm_fp8=[{"tokens_per_expert": 256, "n": 8, "k": 8, "flop_per_s": 989.5e12}],
    )
    merged = gk.merge_runs([SYNTHETIC, second])
    assert merged["commands"] == ["by hand", "again"]
    text = gk.report(merged, "h200")
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1] for r in text.splitlines() if r.startswith("| ")}
    assert rows["device copy (read + write)"] == "0.88 – 0.90"  # 4.2 and 4.32 of 4.8
    assert rows["dense bf16 GEMM (512–16,384 rows), of bf16 peak"] == "0.50 – 0.70"  # 494.5 and 692.3 of 989
    assert rows["weights streamed by decode GEMMs (1–256 rows), of HBM"] == "0.50 – 0.75"  # the first run's only
    assert rows["grouped MoE GEMM, fp8 (row scales), ≥ 256 rows per expert, of fp8 peak"] == "0.50"  # 989.5 of 1,979
    assert "Ranges over every shape of 2 runs" in text
