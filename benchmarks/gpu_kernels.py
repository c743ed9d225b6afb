"""Benchmark: the kernel classes of the cost model, measured on one GPU, against the fitted constants.

The calibrated constants (``perf/calibrated/params.json``) are fractions of a datasheet peak,
fitted on serving benchmarks: ``matmul_efficiency`` × the engine's ``compute_scale`` for dense
GEMMs, ``weight_bandwidth_efficiency`` for streaming weights in decode, and so on. This script
measures what the same kernel classes reach on the GPU it runs on, with PyTorch's own kernels
(cuBLAS GEMMs, FlashAttention through SDPA, grouped GEMMs), so the two can be set side by side:
a fitted fraction above what the GPU can do would be a constant soaking up something else.

    python benchmarks/gpu_kernels.py measure --out kernels.json      # on a GPU (about a minute)
    python benchmarks/gpu_kernels.py measure --smoke --out k.json    # tiny shapes, CPU allowed
    python benchmarks/gpu_kernels.py report run1.json run2.json --gpu h200 --figure k.png  # anywhere

``measure`` needs only torch; ``report`` reads the JSON and the shipped constants. Timings are CUDA
events (wall clock on the CPU), the median of ``--iters`` runs after warm-up. Shapes are
Llama-3.1-70B's and DeepSeek-V3's (TP1), the models the calibration file holds most rows of.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# --- timing ---------------------------------------------------------------------------------------


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_it(fn: Callable[[], Any], dev: torch.device, iters: int, warmup: int = 3) -> float:
    """Median seconds of one call of ``fn`` (CUDA events on a GPU, the wall clock on a CPU)."""
    for _ in range(warmup):
        fn()
    _sync(dev)
    times: list[float] = []
    for _ in range(iters):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


# --- the kernel classes ---------------------------------------------------------------------------


def copy_bandwidth(dev: torch.device, nbytes: int, iters: int) -> dict[str, Any]:
    """Device copy: bytes read + written per second (the figure GPU vendors quote)."""
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev).normal_()
    y = torch.empty_like(x)
    s = time_it(lambda: y.copy_(x), dev, iters)
    return {"bytes": 2 * nbytes, "seconds": s, "bytes_per_s": 2 * nbytes / s}


def _linear_times(dev: torch.device, shapes: list[tuple[int, int]], rows: list[int], iters: int) -> list[dict]:
    """Seconds of a bf16 ``linear`` of M rows against each weight [N, K]."""
    out = []
    for n, k in shapes:
        w = torch.randn(n, k, dtype=torch.bfloat16, device=dev) * 0.02
        for m in rows:
            x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            s = time_it(lambda x=x, w=w: torch.nn.functional.linear(x, w), dev, iters)
            out.append({"m": m, "n": n, "k": k, "seconds": s})
        del w
    return out


def weight_streaming(dev: torch.device, shapes: list[tuple[int, int]], rows: list[int], iters: int) -> list[dict]:
    """Decode-like GEMMs: few rows M against a large weight [N, K]; bytes of the weight per second."""
    return [
        {**r, "weight_bytes_per_s": 2 * r["n"] * r["k"] / r["seconds"]} for r in _linear_times(dev, shapes, rows, iters)
    ]


def dense_gemm(dev: torch.device, shapes: list[tuple[int, int]], rows: list[int], iters: int) -> list[dict]:
    """Prefill-like bf16 GEMMs: M rows × weight [N, K]; FLOP/s."""
    return [
        {**r, "flop_per_s": 2 * r["m"] * r["n"] * r["k"] / r["seconds"]}
        for r in _linear_times(dev, shapes, rows, iters)
    ]


def fp8_gemm(dev: torch.device, shapes: list[tuple[int, int]], rows: list[int], iters: int) -> list[dict]:
    """The same GEMMs in FP8 (e4m3, one scale per tensor, bf16 out) through ``torch._scaled_mm``."""
    out = []
    one = torch.tensor(1.0, device=dev)
    for n, k in shapes:
        w8 = (torch.randn(n, k, device=dev) * 0.5).to(torch.float8_e4m3fn)
        for m in rows:
            x8 = (torch.randn(m, k, device=dev) * 0.5).to(torch.float8_e4m3fn)

            def run(x8: torch.Tensor = x8, w8: torch.Tensor = w8) -> torch.Tensor:
                return torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            s = time_it(run, dev, iters)
            out.append({"m": m, "n": n, "k": k, "seconds": s, "flop_per_s": 2 * m * n * k / s})
        del w8
    return out


def grouped_moe_gemm(
    dev: torch.device, experts: int, n: int, k: int, tokens_per_expert: list[int], iters: int
) -> list[dict]:
    """Routed experts' up-projection as one grouped GEMM (``torch._grouped_mm``): every expert gets
    ``t`` rows. FLOP/s, and the experts' weight bytes per second (the bound at few rows)."""
    out = []
    w = torch.randn(experts, n, k, dtype=torch.bfloat16, device=dev) * 0.02
    b = w.transpose(-2, -1)  # [E, K, N], the layout the kernel takes
    for t in tokens_per_expert:
        a = torch.randn(experts * t, k, dtype=torch.bfloat16, device=dev)
        offs = torch.arange(t, experts * t + 1, t, dtype=torch.int32, device=dev)
        case: dict[str, Any] = {"experts": experts, "tokens_per_expert": t, "n": n, "k": k}
        try:
            s = time_it(lambda a=a, offs=offs: torch._grouped_mm(a, b, offs=offs), dev, iters)
        except Exception as exc:  # a size the kernel refuses: keep the others
            out.append({**case, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]})
            continue
        case.update(seconds=s, flop_per_s=2 * experts * t * n * k / s, weight_bytes_per_s=2 * experts * n * k / s)
        out.append(case)
    return out


def fp8_grouped_moe_gemm(
    dev: torch.device, experts: int, n: int, k: int, tokens_per_expert: list[int], iters: int
) -> list[dict]:
    """The grouped GEMM of ``grouped_moe_gemm`` in FP8 (e4m3, a scale per row of the tokens and
    per output column of each expert, bf16 out) through ``torch._scaled_grouped_mm``."""
    out = []
    w8 = (torch.randn(experts, n, k, device=dev) * 0.5).to(torch.float8_e4m3fn)
    b = w8.transpose(-2, -1)
    scale_b = torch.ones(experts, n, device=dev)
    for t in tokens_per_expert:
        a = (torch.randn(experts * t, k, device=dev) * 0.5).to(torch.float8_e4m3fn)
        scale_a = torch.ones(experts * t, device=dev)
        offs = torch.arange(t, experts * t + 1, t, dtype=torch.int32, device=dev)
        case: dict[str, Any] = {"experts": experts, "tokens_per_expert": t, "n": n, "k": k}

        def run(a: torch.Tensor = a, sa: torch.Tensor = scale_a, offs: torch.Tensor = offs) -> torch.Tensor:
            return torch._scaled_grouped_mm(a, b, sa, scale_b, offs=offs, out_dtype=torch.bfloat16)

        try:
            s = time_it(run, dev, iters)
        except Exception as exc:
            out.append({**case, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]})
            continue
        case.update(seconds=s, flop_per_s=2 * experts * t * n * k / s, weight_bytes_per_s=experts * n * k / s)
        out.append(case)
    return out


def routed_moe_gemm(
    dev: torch.device, experts: int, top_k: int, n: int, k: int, tokens: list[int], iters: int
) -> list[dict]:
    """The same grouped GEMM with the rows a router gives: each of ``t`` tokens picks ``top_k`` of
    the experts uniformly at random (seeded), so experts get unequal row counts, some none. Beside
    each, the balanced split of the same rows, to see what the imbalance costs."""
    out = []
    w = torch.randn(experts, n, k, dtype=torch.bfloat16, device=dev) * 0.02
    b = w.transpose(-2, -1)
    g = torch.Generator().manual_seed(0)
    for t in tokens:
        picks = torch.rand(t, experts, generator=g).topk(top_k, dim=1).indices.flatten()
        counts = torch.bincount(picks, minlength=experts)
        rows = int(counts.sum())
        a = torch.randn(rows, k, dtype=torch.bfloat16, device=dev)
        routed = torch.cumsum(counts, 0).to(torch.int32).to(dev)
        even = torch.tensor([rows * (e + 1) // experts for e in range(experts)], dtype=torch.int32, device=dev)
        case: dict[str, Any] = {"tokens": t, "top_k": top_k, "experts": experts, "n": n, "k": k}
        case["max_rows_per_expert"] = int(counts.max())
        case["experts_touched"] = int((counts > 0).sum())
        try:
            for name, offs in (("routed", routed), ("balanced", even)):
                s = time_it(lambda a=a, offs=offs: torch._grouped_mm(a, b, offs=offs), dev, iters)
                case[f"{name}_seconds"] = s
                case[f"{name}_flop_per_s"] = 2 * rows * n * k / s
        except Exception as exc:
            case["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        out.append(case)
    return out


def prefill_attention(dev: torch.device, heads: int, head_dim: int, lengths: list[int], iters: int) -> list[dict]:
    """Causal self-attention of one prompt (bf16 SDPA: FlashAttention on a GPU); FLOP/s counting
    the causal half only (2 GEMMs × 2 FLOP × S²/2 × D × H)."""
    out = []
    for s_len in lengths:
        q = torch.randn(1, heads, s_len, head_dim, dtype=torch.bfloat16, device=dev)
        k, v = torch.randn_like(q), torch.randn_like(q)
        fn = lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        s = time_it(fn, dev, iters)
        flop = 2 * 2 * heads * head_dim * s_len * s_len / 2
        out.append({"seq": s_len, "heads": heads, "head_dim": head_dim, "seconds": s, "flop_per_s": flop / s})
    return out


def decode_attention(
    dev: torch.device, heads: int, head_dim: int, cases: list[tuple[int, int]], iters: int
) -> list[dict]:
    """One query token per sequence over a contiguous K/V cache (bf16 SDPA); cache bytes per second."""
    out = []
    for batch, ctx in cases:
        q = torch.randn(batch, heads, 1, head_dim, dtype=torch.bfloat16, device=dev)
        k = torch.randn(batch, heads, ctx, head_dim, dtype=torch.bfloat16, device=dev)
        v = torch.randn_like(k)
        fn = lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
        s = time_it(fn, dev, iters)
        nbytes = 2 * batch * heads * ctx * head_dim * 2
        out.append({"batch": batch, "context": ctx, "heads": heads, "seconds": s, "cache_bytes_per_s": nbytes / s})
    return out


def launch_gaps(dev: torch.device, kernels: int) -> dict[str, Any]:
    """Seconds per tiny kernel: launched one by one from Python, and replayed from a CUDA graph
    (the floor a graph-captured decode step pays per kernel)."""
    x = torch.zeros(256, device=dev)

    def chain() -> None:
        for _ in range(kernels):
            x.add_(1.0)

    eager = time_it(chain, dev, 5, warmup=2) / kernels
    result: dict[str, Any] = {"kernels": kernels, "eager_s_per_kernel": eager}
    if dev.type == "cuda":
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            chain()
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        result["graph_s_per_kernel"] = time_it(graph.replay, dev, 10, warmup=2) / kernels
    return result


# --- the run --------------------------------------------------------------------------------------

#: Llama-3.1-70B at TP1: QKV [10240, 8192], O [8192, 8192], gate+up [57344, 8192], down [8192, 28672]
LLAMA70B = [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]
#: DeepSeek-V3's routed expert: gate+up [4096, 7168], 256 experts
DSV3_EXPERT = (256, 4096, 7168)


def measure(dev: torch.device, smoke: bool, iters: int, only: set[str] | None = None) -> dict[str, Any]:
    shapes = [(256, 128), (128, 256)] if smoke else LLAMA70B
    decode_rows = [1, 8] if smoke else [1, 16, 64, 128, 256]
    prefill_rows = [64] if smoke else [512, 1024, 2048, 4096, 8192, 16384]
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "smoke": smoke,
        "iters": iters,
        "command": "python " + " ".join(sys.argv),
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        result["multiprocessors"] = props.multi_processor_count
        result["memory_bytes"] = props.total_memory
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("copy", lambda: copy_bandwidth(dev, (1 << 20) if smoke else (4 << 30), iters)),
        ("weight_streaming", lambda: weight_streaming(dev, shapes, decode_rows, iters)),
        ("dense_gemm", lambda: dense_gemm(dev, shapes, prefill_rows, iters)),
        ("fp8_gemm", lambda: fp8_gemm(dev, shapes, prefill_rows, iters)),
        (
            "moe_grouped_gemm",
            lambda: grouped_moe_gemm(
                dev, *((8, 128, 64) if smoke else DSV3_EXPERT), [1, 4] if smoke else [1, 4, 16, 64, 256, 1024], iters
            ),
        ),
        (
            "moe_grouped_gemm_fp8",
            lambda: fp8_grouped_moe_gemm(
                dev, *((8, 128, 64) if smoke else DSV3_EXPERT), [16] if smoke else [16, 64, 256, 1024], iters
            ),
        ),
        (
            "moe_routed_gemm",
            lambda: routed_moe_gemm(
                dev,
                *((8, 2, 128, 64) if smoke else (256, 8, 4096, 7168)),
                [16] if smoke else [64, 512, 2048, 8192, 32768],
                iters,
            ),
        ),
        (
            "prefill_attention",
            lambda: prefill_attention(
                dev, 4 if smoke else 64, 128, [64] if smoke else [1024, 4096, 8192, 16384], iters
            ),
        ),
        (
            "decode_attention",
            lambda: decode_attention(
                dev, 8, 128, [(2, 64)] if smoke else [(1, 8192), (8, 8192), (64, 2048), (64, 8192)], iters
            ),
        ),
        ("launch", lambda: launch_gaps(dev, 50 if smoke else 2000)),
    ]
    for name, run in parts:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            result[name] = run()
        except Exception as exc:  # one kernel class the build lacks must not lose the others
            result[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return result


# --- the report -----------------------------------------------------------------------------------

ENGINES = ("sglang", "vllm", "trtllm")
#: what a run records once (the rest are lists of shapes)
_SINGLE = ("copy", "launch")


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several measurement files as one: each kernel class's shapes from every run (a class that
    failed in a run adds nothing), the device of the first, every command."""
    data: dict[str, Any] = {
        "device": runs[0]["device"],
        "torch": runs[0]["torch"],
        "cuda": runs[0]["cuda"],
        "commands": [r["command"] for r in runs],
    }
    for run in runs:
        for key, value in run.items():
            if key in _SINGLE and isinstance(value, dict) and "error" not in value:
                data.setdefault(key, []).append(value)
            elif isinstance(value, list):
                data.setdefault(key, []).extend(v for v in value if isinstance(v, dict))
    return data


def _fractions(rows: Any, key: str, peak: float) -> list[float]:
    """``key`` of every measured shape as a fraction of ``peak`` (shapes that failed are skipped)."""
    if not isinstance(rows, list):
        return []
    return [float(r[key]) / peak for r in rows if key in r]


def reference(gpu: str) -> tuple[float, float, float, dict[str, Any]]:
    """The catalog's bf16 and fp8 peaks (FLOP/s) and HBM bandwidth (B/s) of ``gpu``, and its fitted
    constants under each engine: what every measured fraction is set against."""
    from tokenmill.hardware.catalog import load_gpu
    from tokenmill.perf.calibrated import params_for

    spec = load_gpu(gpu)
    fit = {e: params_for(gpu, e)[0] for e in ENGINES}
    return spec.flops("bf16"), spec.flops("fp8"), spec.hbm_bandwidth_bytes_per_s, fit


def kernel_classes(data: dict[str, Any], gpu: str) -> list[dict[str, Any]]:
    """Per kernel class: the measured fractions of the datasheet peak over the shapes, and the
    fitted fraction the cost model uses for it under each engine."""
    bf16, fp8, hbm, fit = reference(gpu)

    def fitted(f: Callable[[Any], float]) -> dict[str, float]:
        return {e: f(p) for e, p in fit.items()}

    return [
        {
            "name": "device copy (read + write)",
            "measured": _fractions(data.get("copy"), "bytes_per_s", hbm),
            "fitted": {},
        },
        {
            "name": "weights streamed by decode GEMMs (1–256 rows), of HBM",
            "measured": _fractions(data.get("weight_streaming"), "weight_bytes_per_s", hbm),
            "fitted": fitted(lambda p: p.weight_bandwidth_efficiency),
        },
        {
            "name": "dense bf16 GEMM (512–16,384 rows), of bf16 peak",
            "measured": _fractions(data.get("dense_gemm"), "flop_per_s", bf16),
            "fitted": fitted(lambda p: p.matmul_efficiency * p.compute_scale),
        },
        {
            "name": "dense fp8 GEMM (512–16,384 rows), of fp8 peak",
            "measured": _fractions(data.get("fp8_gemm"), "flop_per_s", fp8),
            "fitted": fitted(lambda p: p.matmul_efficiency * p.compute_scale * p.fp8_matmul_ratio),
        },
        {
            "name": "grouped MoE GEMM, bf16, ≥ 256 rows per expert, of bf16 peak",
            "measured": [
                float(r["flop_per_s"]) / bf16
                for r in data.get("moe_grouped_gemm", [])
                if isinstance(r, dict) and "flop_per_s" in r and r["tokens_per_expert"] >= 256
            ]
            + [
                float(r[f"{split}_flop_per_s"]) / bf16
                for r in data.get("moe_routed_gemm", [])
                for split in ("routed", "balanced")
                if isinstance(r, dict) and f"{split}_flop_per_s" in r and r["tokens"] * r["top_k"] >= 256 * r["experts"]
            ],
            "fitted": fitted(lambda p: p.moe_matmul_efficiency * p.compute_scale),
        },
        {
            "name": "grouped MoE GEMM, fp8 (row scales), ≥ 256 rows per expert, of fp8 peak",
            "measured": [
                float(r["flop_per_s"]) / fp8
                for r in data.get("moe_grouped_gemm_fp8", [])
                if isinstance(r, dict) and "flop_per_s" in r and r["tokens_per_expert"] >= 256
            ],
            "fitted": fitted(lambda p: p.moe_matmul_efficiency * p.compute_scale * p.fp8_matmul_ratio),
        },
        {
            "name": "prefill attention, causal, 1k–16k tokens, of bf16 peak",
            "measured": _fractions(data.get("prefill_attention"), "flop_per_s", bf16),
            "fitted": fitted(lambda p: p.attention_efficiency * p.compute_scale),
        },
        {
            "name": "decode attention (K/V cache read), of HBM",
            "measured": _fractions(data.get("decode_attention"), "cache_bytes_per_s", hbm),
            "fitted": fitted(lambda p: p.cache_bandwidth_efficiency),
        },
    ]


def report(data: dict[str, Any], gpu: str) -> str:
    """Markdown: each kernel class's measured fractions of the datasheet peak beside the fitted ones."""
    if "commands" not in data:  # one run as measured
        data = merge_runs([data])
    bf16, fp8, hbm, fit = reference(gpu)
    lines = [
        f"Measured on {data['device']} (torch {data['torch']}, CUDA {data['cuda']}); datasheet peaks of "
        f"`{gpu}`: bf16 {bf16 / 1e12:.0f} TFLOP/s, fp8 {fp8 / 1e12:.0f} TFLOP/s, "
        f"HBM {hbm / 1e12:.2f} TB/s. Ranges over every shape of "
        + (f"{len(data['commands'])} runs: " if len(data.get("commands", [])) > 1 else "the run: ")
        + ", ".join(f"`{c}`" for c in data.get("commands", [data.get("command", "?")])),
        "",
        "| kernel class | measured fraction, lowest – highest over shapes | fitted fraction ("
        + ", ".join(ENGINES)
        + ") |",
        "|---|---:|---:|",
    ]
    for k in kernel_classes(data, gpu):
        m = k["measured"]
        measured = "not measured" if not m else (f"{m[0]:.2f}" if len(m) == 1 else f"{min(m):.2f} – {max(m):.2f}")
        fitted = " / ".join(f"{v:.2f}" for v in k["fitted"].values()) or "–"
        lines.append(f"| {k['name']} | {measured} | {fitted} |")
    launches = data.get("launch", [])
    launches = [launches] if isinstance(launches, dict) else launches
    graphs = [x for x in launches if "graph_s_per_kernel" in x]
    if graphs:
        per_layer = " / ".join(f"{p.decode_layer_overhead_s * p.overhead_scale * 1e6:.1f}" for p in fit.values())

        def us(key: str) -> str:
            return ", ".join(f"{x[key] * 1e6:.2f}" for x in graphs)

        lines.append(
            f"| kernel launch, µs a kernel: {us('eager_s_per_kernel')} from Python, "
            f"{us('graph_s_per_kernel')} in a CUDA graph | – | per decode layer, µs: {per_layer} |"
        )
    lines.append("")
    return "\n".join(lines)


def figure(data: dict[str, Any], gpu: str, paths: list[Path]) -> None:
    """Each kernel class's measured fraction of peak against its size, the fitted fractions as
    horizontal lines (one per engine)."""
    from tokenmill.report.figure_base import plain_log_labels, pyplot, save

    if "commands" not in data:
        data = merge_runs([data])
    bf16, fp8, hbm, fit = reference(gpu)
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    styles = {"sglang": ":", "vllm": "--", "trtllm": "-."}

    def fitted(ax: Any, f: Callable[[Any], float]) -> None:
        for e, p in fit.items():
            ax.axhline(f(p), color="grey", linestyle=styles[e], linewidth=1.2, label=f"fitted, {e}")

    def curve(ax: Any, pts: list[tuple[float, float]], **style: Any) -> None:
        """Every run's points, and a line through the median at each x."""
        xs = sorted({a for a, _ in pts})
        line = ax.plot(xs, [statistics.median(b for a, b in pts if a == x) for x in xs], **style)
        ax.scatter([a for a, _ in pts], [b for _, b in pts], s=9, color=line[0].get_color(), alpha=0.5)

    def by_shape(ax: Any, rows: list[dict], x: str, y: str, peak: float) -> None:
        shapes = sorted({(r["n"], r["k"]) for r in rows if y in r})
        for n, k in shapes:
            pts = [(r[x], r[y] / peak) for r in rows if (r["n"], r["k"]) == (n, k) and y in r]
            curve(ax, pts, marker="o", label=f"[{n:,} × {k:,}]")

    panels = [
        (
            "Dense bf16 GEMM (prefill)",
            "rows M",
            "dense_gemm",
            "m",
            "flop_per_s",
            bf16,
            lambda p: p.matmul_efficiency * p.compute_scale,
            "of bf16 peak",
        ),
        (
            "Dense fp8 GEMM (per-tensor scales)",
            "rows M",
            "fp8_gemm",
            "m",
            "flop_per_s",
            fp8,
            lambda p: p.matmul_efficiency * p.compute_scale * p.fp8_matmul_ratio,
            "of fp8 peak",
        ),
        (
            "Weights streamed by decode GEMMs",
            "rows M",
            "weight_streaming",
            "m",
            "weight_bytes_per_s",
            hbm,
            lambda p: p.weight_bandwidth_efficiency,
            "of HBM bandwidth",
        ),
    ]
    for ax, (title, xl, key, x, y, peak, f, yl) in zip(axes[0], panels, strict=True):
        by_shape(ax, data.get(key) or [], x, y, peak)
        fitted(ax, f)
        ax.set(title=title, xlabel=xl, ylabel=f"fraction {yl}", xscale="log", ylim=(0, 1))
        plain_log_labels(ax)
        ax.legend(fontsize=7, loc="lower right")
    ax = axes[1][0]
    rows = [r for r in data.get("moe_grouped_gemm") or [] if "flop_per_s" in r]
    curve(
        ax,
        [(r["tokens_per_expert"], r["flop_per_s"] / 1e12) for r in rows],
        marker="o",
        label="bf16, rows split evenly",
    )
    rows = [r for r in data.get("moe_grouped_gemm_fp8") or [] if "flop_per_s" in r]
    if rows:
        pts = [(r["tokens_per_expert"], r["flop_per_s"] / 1e12) for r in rows]
        curve(ax, pts, marker="^", label="fp8 (row scales), split evenly")
    routed = [r for r in data.get("moe_routed_gemm") or [] if "routed_flop_per_s" in r]
    if routed:
        pts = [(r["tokens"] * r["top_k"] / r["experts"], r["routed_flop_per_s"] / 1e12) for r in routed]
        curve(ax, pts, marker="s", label="bf16, random top-8 routing (mean rows)")
    for e, p in fit.items():
        rate = p.moe_matmul_efficiency * p.compute_scale * p.fp8_matmul_ratio * fp8 / 1e12
        ax.axhline(rate, color="grey", linestyle=styles[e], linewidth=1.2, label=f"fitted fp8 rate, {e}")
    ax.set(
        title="Grouped MoE GEMM, 256 experts [4,096 × 7,168]",
        xlabel="rows per expert",
        ylabel="TFLOP/s",
        xscale="log",
        ylim=(0, fp8 / 1e12 * 0.6),
    )
    plain_log_labels(ax)
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[1][1]
    rows = data.get("prefill_attention") or []
    curve(ax, [(r["seq"], r["flop_per_s"] / bf16) for r in rows], marker="o", label="SDPA, 64 heads × 128")
    fitted(ax, lambda p: p.attention_efficiency * p.compute_scale)
    ax.set(
        title="Prefill attention (causal, one prompt)",
        xlabel="prompt tokens",
        ylabel="fraction of bf16 peak",
        xscale="log",
        ylim=(0, 1),
    )
    plain_log_labels(ax)
    ax.legend(fontsize=7, loc="lower right")
    ax = axes[1][2]
    rows = data.get("decode_attention") or []
    cases = sorted({(r["batch"], r["context"]) for r in rows})
    labels = [f"{b} × {c:,}" for b, c in cases]
    medians = [
        statistics.median(r["cache_bytes_per_s"] / hbm for r in rows if (r["batch"], r["context"]) == bc)
        for bc in cases
    ]
    ax.bar(labels, medians, color="tab:blue", label="SDPA, 8 heads × 128 (median of runs)")
    fitted(ax, lambda p: p.cache_bandwidth_efficiency)
    ax.set(
        title="Decode attention (K/V cache read)",
        xlabel="sequences × context tokens",
        ylabel="fraction of HBM bandwidth",
        ylim=(0, 1),
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{data['device']}: PyTorch kernels against the cost model's fitted constants for {gpu}")
    fig.tight_layout()
    save(fig, paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time the kernel classes on this machine's GPU")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--smoke", action="store_true", help="tiny shapes; runs on a CPU too")
    m.add_argument("--iters", type=int, default=20)
    m.add_argument("--only", default="", help="comma-separated kernel classes (default: all)")
    r = sub.add_parser("report", help="markdown table of a measurement against the fitted constants")
    r.add_argument("json", type=Path, nargs="+", help="measurements (several: merged, a later file's class wins)")
    r.add_argument("--gpu", default="h200")
    r.add_argument("--figure", type=Path, action="append", default=[], help=".png or .svg (repeatable)")
    args = parser.parse_args()
    if args.cmd == "measure":
        if torch.cuda.is_available():
            dev = torch.device("cuda")
        elif args.smoke:
            dev = torch.device("cpu")
        else:
            sys.exit("error: no CUDA device; use --smoke to try the script on a CPU")
        data = measure(dev, args.smoke, args.iters, set(filter(None, args.only.split(","))) or None)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        data = merge_runs([json.loads(path.read_text()) for path in args.json])
        print(report(data, args.gpu))
        if args.figure:
            figure(data, args.gpu, args.figure)


if __name__ == "__main__":
    main()
