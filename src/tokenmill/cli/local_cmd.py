"""``tokenmill calibrate local``: measure this machine and the engine's own steps; write a hardware
entry (``--gpu cpu``) and the cost-model constants fitted to those steps.

Then ``tokenmill simulate --model kimi-linear-tiny --gpu cpu --gpus 1 ...`` predicts what
``tokenmill serve`` does on this machine (docs/engine.md, benchmarks/bench_vs_simulate.py). With
``--device cuda`` (or ``auto`` on a machine with a GPU, as ``serve`` picks) the engine, the GEMM
and the copy run on the GPU, and the entry is named ``cuda`` unless ``--name`` says otherwise.
"""

import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.options import JsonOpt
from tokenmill.cli.runtime_cmd import (
    ChunkOpt,
    DeviceOpt,
    DtypeOpt,
    MemOpt,
    PageSizeOpt,
    RtModelOpt,
    RunningOpt,
    _engine_options,
)
from tokenmill.errors import TokenmillError

_NAME_HELP = "Name of the entry (--gpu NAME afterwards; default: cpu, or cuda when --device is a GPU)."


def simulate_flags(
    gpu: str = "cpu", page_size: int = 16, chunk_tokens: int = 2048, max_running: int = 64, memory_gib: float = 1.0
) -> list[str]:
    """``tokenmill simulate`` flags that schedule as ``tokenmill serve`` does with these settings (its
    defaults): the embedded model's preset, one device, the same pages, chunks, running cap and pool
    budget, and decodes riding in prefill steps."""
    return [
        "--model",
        "kimi-linear-tiny",
        "--gpu",
        gpu,
        "--gpus",
        "1",
        "--page-size",
        str(page_size),
        "--chunk-tokens",
        str(chunk_tokens),
        "--mixed-chunk",
        "--pool-budget-gib",
        f"{memory_gib:g}",
        "--max-running-requests",
        str(max_running),
    ]


def _shape(step: Any) -> Any:
    """A timed step (plain tuples) as the cost model's ``BatchShape``."""
    from tokenmill.perf import BatchShape, DecodeWork, PrefillWork

    return BatchShape(
        prefill=tuple(PrefillWork(n, start, last) for n, start, last in step.prefill),
        decode=tuple(DecodeWork(c, k) for c, k in step.decode),
    )


def _write_steps(path: Path, steps: list[tuple[Any, float]], predicted: tuple[float, ...]) -> None:
    """The timed steps and the fit's prediction of each, for a look at where the model errs."""
    import csv

    cols = ["prefill_seqs", "prefill_tokens", "prefill_context", "decode_seqs", "decode_context", "measured_ms"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*cols, "predicted_ms"])
        for (shape, seconds), pred in zip(steps, predicted, strict=True):
            w.writerow(
                [
                    len(shape.prefill),
                    shape.prefill_tokens,
                    sum(p.context for p in shape.prefill),
                    len(shape.decode),
                    sum(d.context for d in shape.decode),
                    f"{seconds * 1e3:.4f}",
                    f"{pred * 1e3:.4f}",
                ]
            )


def local(
    model: RtModelOpt = None,
    name: Annotated[str | None, typer.Option("--name", help=_NAME_HELP)] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", help="Folder for NAME.toml and NAME.perf.json (default: user cache).")
    ] = None,
    dtype: DtypeOpt = "bfloat16",
    memory_gib: MemOpt = 1.0,
    page_size: PageSizeOpt = 16,
    chunk_tokens: ChunkOpt = 2048,
    max_running_requests: RunningOpt = 64,
    quick: Annotated[bool, typer.Option("--quick", help="A few small scenarios (a smoke test, not a fit).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random prompts.")] = 0,
    device: DeviceOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Measure this machine (GEMM rate, memory bandwidth) and time the engine's steps; write a
    hardware entry and the cost-model constants fitted to the steps."""
    import platform
    import re

    import torch

    from tokenmill.hardware import known_gpu_names
    from tokenmill.hardware.catalog import parse_gpu_toml
    from tokenmill.hardware.local import (
        MachineMeasurements,
        cpu_model_name,
        gpu_description,
        physical_memory_bytes,
        render_toml,
        write_entry,
    )
    from tokenmill.paths import user_hardware_dir
    from tokenmill.perf.calibrated import local_params_path, write_local_params
    from tokenmill.perf.local_fit import fit_local
    from tokenmill.plan.layout import Layout, PrefixCache
    from tokenmill.runtime.llm import LLM
    from tokenmill.runtime.step_timing import (
        COPY_BYTES,
        DEFAULT_SCENARIOS,
        GEMM_SIZE,
        QUICK_SCENARIOS,
        matmul_flops,
        memory_bandwidth,
        time_engine_steps,
    )
    from tokenmill.spec import load_model

    if name is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", name):
        raise TokenmillError(f"--name must be a lower-case name (letters, digits, '_', '-', '.'), got {name!r}")
    if name is not None and name in known_gpu_names():
        raise TokenmillError(f"--name {name!r} is a bundled GPU; choose another name (default: cpu or cuda)")
    opts = _engine_options(
        dtype, memory_gib, None, None, page_size, chunk_tokens, max_running_requests, True, None, seed, device
    )
    from tokenmill.runtime.device import device_kind

    kind = device_kind(opts.device)
    on_gpu = kind == "cuda"
    name = name if name is not None else kind

    def say(message: str) -> None:
        if not json_out:
            print(message, file=sys.stderr)

    t_start = time.perf_counter()
    llm = LLM(model, opts)
    torch_dtype = next(iter(llm.model.parameters())).dtype
    threads = torch.get_num_threads()
    if on_gpu:
        display, vendor, architecture, memory_bytes = gpu_description(opts.device)
        say(f"measuring {display} ({opts.device}): GEMM rate and memory bandwidth")
    else:
        display, vendor, architecture = cpu_model_name(), "cpu", platform.machine() or "cpu"
        memory_bytes = physical_memory_bytes()
        say(f"measuring {display} on {threads} thread(s): GEMM rate and memory bandwidth")
    flops = matmul_flops(torch_dtype, device=opts.device)
    bandwidth = memory_bandwidth(device=opts.device)
    scenarios = QUICK_SCENARIOS if quick else DEFAULT_SCENARIOS
    say(f"timing the engine's steps: {len(scenarios)} scenarios of {llm.model_dir.name} ({dtype})")
    show = not json_out and sys.stderr.isatty()
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("engine steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            task = bar.add_task("steps", total=len(scenarios))
            timed = time_engine_steps(llm, scenarios, seed, on_scenario=lambda _: bar.advance(task))
    else:
        timed = time_engine_steps(llm, scenarios, seed)

    argv = ["tokenmill", "calibrate", "local"]
    if model is not None:
        argv += ["--model", str(model)]
    argv += ["--dtype", dtype] + (["--quick"] if quick else []) + (["--device", opts.device] if on_gpu else [])
    folder = out_dir if out_dir is not None else user_hardware_dir()
    measured = MachineMeasurements(
        name=name,
        display_name=display,
        architecture=architecture,
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth,
        gemm_flops=flops,
        engine_dtype=dtype,
        threads=threads,
        command=" ".join(argv),
        device=opts.device,
        vendor=vendor,
        gemm_size=GEMM_SIZE[kind],
        copy_bytes=COPY_BYTES[kind],
    )
    spec = load_model(str(llm.model_dir))
    layout = Layout(tp=1, page_size=page_size, prefix_cache=PrefixCache.EXTRA_BUFFER)
    machine = parse_gpu_toml(render_toml(measured), f"{name}.toml")
    shapes = [(_shape(s), s.seconds) for s in timed]
    fit = fit_local(spec, machine, layout, shapes)
    say("measuring what serving costs: tokenmill serve driven by tokenmill bench")
    from tokenmill.perf import CostModel
    from tokenmill.runtime.serving_cost import stream_cost_per_token

    stream = stream_cost_per_token(llm, concurrency=4, requests=8) if quick else stream_cost_per_token(llm)
    # What a streamed token costs the step as served: the median over served decode steps of their
    # time beyond the same shape run offline, per token streamed. "Offline" is the fit's prediction
    # times its own bias on that size class of step (so the fit's error is not counted as serving
    # cost); the median, because a shared 2-core box adds stalls of its own. The loop's own CPU
    # time is a lower bound.
    from tokenmill.perf.local_fit import size_class

    offline = CostModel(spec, machine, layout, fit.params)
    excess = sorted(
        (served.seconds - offline.seconds(shape) * fit.class_bias.get(size_class(shape), 1.0)) / len(shape.decode)
        for served in stream.served_steps
        if (shape := _shape(served)).decode and not shape.prefill
    )
    per_token = max(stream.seconds_per_token, excess[len(excess) // 2] if excess else 0.0)
    params = fit.params.updated(stream_per_token_s=per_token, front_end_per_request_s=stream.seconds_per_request)
    try:
        entry_path, _ = write_entry(measured, folder)
        params_path = local_params_path(str(entry_path))
        meta: dict[str, Any] = {
            "command": measured.command,
            "measured_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "model": llm.model_dir.name,
            "dtype": dtype,
            "device": opts.device,
            "device_name": display,
            "threads": threads,
            "gemm_tflops": round(flops / 1e12, 5),
            "memory_bandwidth_gb_s": round(bandwidth / 1e9, 3),
            "steps": fit.steps,
            "prefill_steps": fit.prefill_steps,
            "step_median_abs_pct_error": round(fit.median_abs_pct_error, 2),
            "step_p90_abs_pct_error": round(fit.p90_abs_pct_error, 2),
            "total_time_error_pct": round(fit.total_time_error_pct, 2),
            "stream_tokens_measured": stream.tokens,
            "stream_loop_cpu_s": round(stream.loop_cpu_s, 4),
            "front_end_cpu_per_token_s": float(f"{stream.seconds_per_token:.6g}"),
            "served_steps": len(stream.served_steps),
        }
        write_local_params(params_path, params, meta)
        steps_path = entry_path.with_name(f"{name}.steps.csv")
        _write_steps(steps_path, [(s, t) for s, t in shapes if not s.is_empty and t > 0], fit.predicted_s)
    except OSError as exc:
        raise TokenmillError(f"--out-dir: cannot write to {folder}: {exc.strerror}") from None
    result = {
        "entry": str(entry_path),
        "params": str(params_path),
        "steps_csv": str(steps_path),
        "fitted": {k: float(f"{v:.6g}") for k, v in fit.fitted.items()},
        "stream_per_token_s": float(f"{per_token:.6g}"),
        "front_end_per_request_s": float(f"{stream.seconds_per_request:.6g}"),
        **{k: v for k, v in meta.items() if k not in ("command",)},
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    if json_out:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    t = Table(title=f"{name}: measured on this machine", show_edge=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    where = opts.device if on_gpu else f"{threads} thread(s)"
    t.add_row(f"GEMM rate ({dtype}, {where})", f"{flops / 1e9:,.1f} GFLOP/s")
    t.add_row("memory bandwidth (copy)", f"{bandwidth / 1e9:,.1f} GB/s")
    t.add_row("engine steps timed", f"{fit.steps:,} ({fit.prefill_steps:,} with prefill)")
    for k, v in fit.fitted.items():
        t.add_row(k, f"{v:.4g}")
    t.add_row("serving cost per streamed token", f"{per_token * 1e6:.1f} µs")
    t.add_row("  of which the front end's own CPU", f"{stream.seconds_per_token * 1e6:.1f} µs")
    t.add_row("server front end per request", f"{stream.seconds_per_request * 1e3:.3f} ms")
    t.add_row("step time error: median / p90", f"{fit.median_abs_pct_error:.1f} % / {fit.p90_abs_pct_error:.1f} %")
    t.add_row("total time error", f"{fit.total_time_error_pct:+.1f} %")
    print_table(Console(), t)
    print(f"wrote {entry_path}, {params_path} and the timed steps {steps_path}")
    flags = simulate_flags(name, page_size, chunk_tokens, max_running_requests, memory_gib)
    print(f"next: tokenmill simulate {' '.join(flags)} --workload ... (as tokenmill serve schedules)")
