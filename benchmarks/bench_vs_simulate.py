"""The live server against the simulator, on this machine: ``tokenmill bench`` vs ``tokenmill simulate``.

1. ``tokenmill calibrate local`` measures this machine as the hardware entry ``cpu`` (GEMM rate,
   memory bandwidth, the engine's own steps, the server front end's time per streamed token).
2. ``tokenmill serve`` runs the embedded model; ``tokenmill bench`` drives it with a closed-loop
   random workload at each concurrency.
3. ``tokenmill simulate`` runs the same workload (same generator, seed and lengths) on the
   ``kimi-linear-tiny`` preset over ``--gpu cpu`` with the server's scheduler settings.
4. The report puts mean TTFT and TPOT side by side with the error of the simulation.

    .venv/bin/python benchmarks/bench_vs_simulate.py [--skip-calibrate] [--concurrency 1,4,8,16,32]
    python benchmarks/bench_vs_simulate.py --device cuda --out R.md --figure F.png   # on a GPU

Writes benchmarks/results/bench_vs_simulate.md. Takes about four minutes on two cores. Run it on
a quiet machine: anything else on the cores slows the live server and not the simulation. With
``--device cuda`` the calibration, the server and so the entry (``cuda``) are the GPU's.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from tokenmill.cli.local_cmd import simulate_flags
from tokenmill.runtime.device import device_kind
from tokenmill.workload.server_process import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
# The CLI as this interpreter runs it (no console script needed: on a GPU machine with PYTHONPATH=src).
TM = [sys.executable, "-m", "tokenmill.cli"]
# The server's scheduler settings (tokenmill serve's defaults) and the dtype the entry is measured in.
SERVE = ["--dtype", "bfloat16", "--page-size", "16", "--chunk-tokens", "2048", "--max-running-requests", "64"]


def _run_json(cmd: list[str]) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def workload_args(isl: int, osl: int, c: int, seed: int) -> list[str]:
    return [
        "--workload",
        "random",
        "--isl",
        str(isl),
        "--osl",
        str(osl),
        "--concurrency",
        str(c),
        "--seed",
        str(seed),
        "--json",
    ]


def _bench(port: int, num_prompts: int, workload: list[str]) -> dict[str, Any]:
    """One ``tokenmill bench`` run against the live server on ``port`` (its JSON summary)."""
    url = f"http://127.0.0.1:{port}"
    cmd = [*TM, "bench", "--base-url", url, "--model", "tokenmill-default", "--num-prompts", str(num_prompts)]
    return _run_json([*cmd, "--tokenizer-vocab", "4096", *workload])


def error_pct(sim: float, live: float) -> float:
    """The simulation's error relative to the live measurement, in percent."""
    return (sim / live - 1.0) * 100.0


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# The live server against the simulator (`tokenmill bench` vs `tokenmill simulate`)",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- command: `{meta['command']}`",
        f"- workload: random, {meta['isl']}-token prompts, {meta['osl']} output tokens, "
        f"{meta['num_prompts']} requests per point, closed loop, seed {meta['seed']}; live: the mean of "
        f"{meta['reps']} runs per point (all points once, then again; the first at each concurrency after "
        "`--num-warmups` 2 × C untimed requests), each run's value in brackets",
        f"- calibration (`tokenmill calibrate local`, {meta['calibration'].get('measured_at', '?')}): "
        f"GEMM {meta['calibration'].get('gemm_tflops', 0) * 1000:.0f} GFLOP/s, "
        f"copy {meta['calibration'].get('memory_bandwidth_gb_s', 0):.1f} GB/s, "
        f"{meta['calibration'].get('steps', '?')} engine steps timed (median step error "
        f"{meta['calibration'].get('step_median_abs_pct_error', '?')} %), front end "
        f"{meta['calibration'].get('stream_per_token_s', 0) * 1e6:.0f} µs per streamed token",
        f"- live: `{meta['serve']}` and `{meta['bench']}`",
        f"- simulated: `{meta['simulate']}`",
        "",
        "| concurrency | live mean TTFT ms | simulated | error | live mean TPOT ms | simulated | error "
        "| live output tok/s | simulated | within 20 % |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:--:|",
    ]
    for r in rows:
        ok = abs(r["ttft_err"]) <= 20 and abs(r["tpot_err"]) <= 20
        ttft_runs = "/".join(f"{v:.0f}" for v in r["live_ttft_runs"])
        tpot_runs = "/".join(f"{v:.2f}" for v in r["live_tpot_runs"])
        lines.append(
            f"| {r['c']} | {r['live_ttft']:.1f} ({ttft_runs}) | {r['sim_ttft']:.1f} | {r['ttft_err']:+.1f} % "
            f"| {r['live_tpot']:.2f} ({tpot_runs}) | {r['sim_tpot']:.2f} | {r['tpot_err']:+.1f} % "
            f"| {r['live_tput']:.0f} | {r['sim_tput']:.0f} | {'yes' if ok else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,4,8,16,32")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2, help="Live runs per point (interleaved); their mean is compared.")
    ap.add_argument("--skip-calibrate", action="store_true", help="Reuse the entry measured before.")
    ap.add_argument("--device", default="cpu", help="cpu|cuda|cuda:N: where the engine runs (calibrated and served).")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_vs_simulate.md")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "bench-vs-simulate.png")
    ap.add_argument("--redraw", action="store_true", help="Only redraw the figure from the saved rows.")
    args = ap.parse_args()
    rows_path = args.out.with_suffix(".json")
    if args.redraw:
        saved = json.loads(rows_path.read_text())
        draw(saved["rows"], args.figure, saved["title"])
        return
    levels = [int(c) for c in args.concurrency.split(",")]
    entry = device_kind(args.device)  # calibrate local's default name for the entry of that device
    device_flags = ["--device", args.device]
    sim_flags = simulate_flags(entry)  # the server's scheduler settings (its defaults) as simulate flags

    if args.skip_calibrate:
        params = Path(os.environ.get("TOKENMILL_CACHE", Path.home() / ".cache" / "tokenmill")) / "hardware"
        cal = json.loads((params / f"{entry}.perf.json").read_text())["meta"]
        cal |= json.loads((params / f"{entry}.perf.json").read_text())["params"]
    else:
        print("== tokenmill calibrate local", file=sys.stderr)
        cal = _run_json([*TM, "calibrate", "local", "--dtype", "bfloat16", *device_flags, "--json"])
        cal |= cal.pop("fitted", {})

    port = free_port()
    serve = [*TM, "serve", "--port", str(port), *SERVE, *device_flags]
    print(f"== {' '.join(serve)}", file=sys.stderr)
    proc = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}
    try:
        wait_healthy(port, proc)
        for rep, c in ((r, c) for r in range(args.reps) for c in levels):
            print(f"== bench at concurrency {c} (run {rep + 1} of {args.reps})", file=sys.stderr)
            # The first run at each load starts with untimed warm-ups: its batch shapes run once
            # before they are timed (a server's first requests pay one-time costs, a GPU's most).
            warmups = ["--num-warmups", str(max(8, 2 * c))] if rep == 0 else []
            got = _bench(port, args.num_prompts, [*workload_args(args.isl, args.osl, c, args.seed), *warmups])
            if got["completed"] != args.num_prompts:
                raise SystemExit(f"bench at {c}: {got['failed']} failed: {got.get('errors', [])[:3]}")
            live[c].append(got)
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    rows = []
    for c in levels:
        sim = _run_json(
            [
                *TM,
                "simulate",
                *sim_flags,
                "--num-requests",
                str(args.num_prompts),
                *workload_args(args.isl, args.osl, c, args.seed),
            ]
        )
        runs = live[c]
        lv = {k: statistics.fmean(r[k] for r in runs) for k in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput")}
        rows.append(
            {
                "c": c,
                "live_ttft_runs": [r["mean_ttft_ms"] for r in runs],
                "live_tpot_runs": [r["mean_tpot_ms"] for r in runs],
                "live_ttft": lv["mean_ttft_ms"],
                "sim_ttft": sim["mean_ttft_ms"],
                "ttft_err": error_pct(sim["mean_ttft_ms"], lv["mean_ttft_ms"]),
                "live_tpot": lv["mean_tpot_ms"],
                "sim_tpot": sim["mean_tpot_ms"],
                "tpot_err": error_pct(sim["mean_tpot_ms"], lv["mean_tpot_ms"]),
                "live_tput": lv["output_throughput"],
                "sim_tput": sim["output_throughput"],
            }
        )
        print(
            f"C={c}: TTFT {lv['mean_ttft_ms']:.1f} vs {sim['mean_ttft_ms']:.1f} ms, "
            f"TPOT {lv['mean_tpot_ms']:.2f} vs {sim['mean_tpot_ms']:.2f} ms",
            file=sys.stderr,
        )
    load = os.getloadavg()
    meta = {
        "date": _dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": f"{platform.machine()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"
        + (f"; engine on {cal.get('device_name', args.device)} ({args.device})" if args.device != "cpu" else ""),
        "command": "python benchmarks/bench_vs_simulate.py"
        + (" --skip-calibrate" if args.skip_calibrate else "")
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (f" --concurrency {args.concurrency}" if args.concurrency != "1,4,8,16,32" else "")
        + (f" --num-prompts {args.num_prompts}" if args.num_prompts != 256 else ""),
        "isl": args.isl,
        "reps": args.reps,
        "osl": args.osl,
        "num_prompts": args.num_prompts,
        "seed": args.seed,
        "calibration": cal,
        "serve": "tokenmill serve " + " ".join(SERVE + device_flags),
        "bench": f"tokenmill bench --workload random --isl {args.isl} --osl {args.osl} --num-prompts "
        f"{args.num_prompts} --concurrency C --seed {args.seed} --tokenizer-vocab 4096",
        "simulate": "tokenmill simulate " + " ".join(sim_flags) + f" --workload random --isl {args.isl} --osl "
        f"{args.osl} --num-requests {args.num_prompts} --concurrency C --seed {args.seed}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, meta))
    where = "this CPU" if args.device == "cpu" else str(cal.get("device_name", args.device))
    title = f"embedded model on {where}, {args.isl}/{args.osl} tokens, {args.num_prompts} requests per point"
    rows_path.write_text(json.dumps({"title": title, "rows": rows, "meta": meta}, indent=2) + "\n")
    draw(rows, args.figure, title)
    print(f"wrote {args.out}, {rows_path} and {args.figure} (+ .svg)", file=sys.stderr)


def draw(rows: list[dict[str, Any]], figure: Path, title: str) -> None:
    from tokenmill.report.sim_figures import live_vs_simulated_figure

    figure.parent.mkdir(parents=True, exist_ok=True)
    live_vs_simulated_figure(rows, [figure, figure.with_suffix(".svg")], title)


if __name__ == "__main__":
    main()
