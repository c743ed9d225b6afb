"""Figures of the simulator (the seed's Figures 4 and 5).

- ``timeline_figure``: decoding output per second over time, with the prompts that arrive (the
  interference experiment: 16 streams, then one prompt per second).
- ``attainment_figure``: SLO attainment against the Poisson arrival rate, one line per layout,
  with the target and each layout's sustained rate.
- ``latency_figure``: mean TTFT and TPOT against closed-loop concurrency, one line per layout.
- ``live_vs_simulated_figure``: the live server against the simulator on the same workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenmill.report.figure_base import FigurePaths, figure_paths, pyplot, save
from tokenmill.sim.runner import SimulationResult


def timeline_figure(
    runs: Sequence[tuple[str, SimulationResult]],
    path: FigurePaths,
    title: str = "",
    stream_prefix: str = "stream-",
    probe_prefix: str = "probe-",
    bin_s: float = 1.0,
) -> FigurePaths:
    figure_paths(path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    colors = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b"]
    x_end = 0.0
    for i, (label, res) in enumerate(runs):
        streams = [r for r in res.records if r.request_id.startswith(stream_prefix)]
        times = (
            [t for r in streams for t in r.token_times_s]
            if streams
            else [t for r in res.records for t in r.token_times_s]
        )
        if not times:
            continue
        end = max(times)
        n_bins = int(end / bin_s) + 1
        counts = [0] * n_bins
        for t in times:
            counts[int(t / bin_s)] += 1
        xs = [(k + 0.5) * bin_s for k in range(n_bins)]
        ax.step(
            xs,
            [c / bin_s for c in counts],
            where="mid",
            color=colors[i % len(colors)],
            label=f"{label}: decoding streams",
        )
        probes = [r.send_s for r in res.records if r.request_id.startswith(probe_prefix)]
        if probes:
            ax.axvspan(min(probes), max(probes) + 1.0, color="gray", alpha=0.06)
            x_end = max(x_end, max(probes) + 15.0)
        else:
            x_end = max(x_end, end)
    ax.set_xlim(0, x_end)
    ax.set_xlabel("simulated time (s); shaded: one prompt arrives per second")
    ax.set_ylabel(f"output tokens/s of the streams ({bin_s:g} s bins)")
    ax.set_title(title or "decoding output over time")
    ax.legend(fontsize=8, loc="lower left")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def attainment_figure(results: dict[str, Any], path: FigurePaths, target: float, title: str = "") -> FigurePaths:
    figure_paths(path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for name, entry in results["layouts"].items():
        pts = sorted(entry["rates"], key=lambda p: p["rate"])
        if not pts:
            continue
        line = ax.plot([p["rate"] for p in pts], [100 * p["slo_attainment"] for p in pts], "o-", label=name)
        if entry.get("sustained_rate") is not None:
            ax.axvline(entry["sustained_rate"], color=line[0].get_color(), linestyle=":", linewidth=1)
    ax.axhline(100 * target, color="gray", linestyle="--", linewidth=1)
    ax.text(ax.get_xlim()[0], 100 * target, f" target {target:.0%}", va="bottom", fontsize=8, color="gray")
    slo = results.get("slo", {})
    ax.set_xlabel("Poisson arrival rate (requests/s)")
    ax.set_ylabel(f"requests within TTFT ≤ {slo.get('ttft_ms', 2000):g} ms, TPOT ≤ {slo.get('tpot_ms', 25):g} ms (%)")
    ax.set_ylim(0, 102)
    ax.set_title(title or "SLO attainment against rate")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def latency_figure(results: dict[str, Any], path: FigurePaths, title: str = "") -> FigurePaths:
    figure_paths(path)
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    levels: set[int] = set()
    for name, entry in results["layouts"].items():
        pts = sorted(entry["concurrency"], key=lambda p: p["concurrency"])
        if not pts:
            continue
        xs = [p["concurrency"] for p in pts]
        levels.update(xs)
        ax1.plot(xs, [p["mean_tpot_ms"] for p in pts], "o-", label=name)
        ax2.plot(xs, [p["mean_ttft_ms"] / 1000 for p in pts], "o-", label=name)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        if levels:  # the concurrencies run, as numbers (not powers of two)
            ax.set_xticks(sorted(levels), [f"{c:,}" for c in sorted(levels)])
            ax.minorticks_off()
        ax.set_xlabel("concurrent requests (closed loop)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax1.set_ylabel("mean time per output token (ms)")
    ax2.set_ylabel("mean time to first token (s)")
    fig.suptitle(title or "latency against concurrency")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def live_vs_simulated_figure(rows: Sequence[dict[str, Any]], path: FigurePaths, title: str = "") -> FigurePaths:
    """Mean TPOT and TTFT against concurrency: the live server (with a ±20 % band) and the simulator.

    ``rows``: one per concurrency with ``c``, ``live_ttft``, ``sim_ttft``, ``live_tpot``, ``sim_tpot``
    (milliseconds), as ``benchmarks/bench_vs_simulate.py`` writes them."""
    figure_paths(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    pts = sorted(rows, key=lambda r: r["c"])
    xs = [r["c"] for r in pts]
    for ax, key, label in ((axes[0], "tpot", "mean time per output token (ms)"), (axes[1], "ttft", "mean TTFT (ms)")):
        live = [r[f"live_{key}"] for r in pts]
        ax.fill_between(xs, [v * 0.8 for v in live], [v * 1.2 for v in live], alpha=0.15, label="live ± 20 %")
        ax.plot(xs, live, "o-", label="live server (tokenmill bench)")
        ax.plot(xs, [r[f"sim_{key}"] for r in pts], "s--", label="simulated (tokenmill simulate)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("concurrent requests (closed loop)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(title or "live server against the simulator")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path
