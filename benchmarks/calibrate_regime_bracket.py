"""Where the TTFT error lives: do the two replays bracket the measured TTFT, and how much of the
predicted TTFT is queueing?

Run: ``.venv/bin/python benchmarks/calibrate_regime_bracket.py [--predictions PRED.csv]
[--measurements FILE.csv] [--models-dir DIR] [--params FILE.json] [--jobs 2] [--json]``
(about 3 minutes with two jobs on two cores; seconds with ``--predictions``, the PRED.csv of a
``tokenmill calibrate evaluate`` run on the same measurements and constants).

A closed-loop point is predicted as a mixture of two replays (docs/perf.md section 2): lanes in
lock step (a burst from an idle server, every wave a burst again) and lanes drifted apart, mixed
by the engine's fitted ``burst_share``. Whatever the share, a row's predicted TTFT lies between
the two, which ``calibrate evaluate`` writes beside it (``predicted_ttft_lock_step_ms``,
``predicted_ttft_drifted_ms``). The first table counts, by engine, the aggregated rows whose
measured TTFT lies above both replays, below both, or between them: only the last can be reached
by a better share, per engine, per row or from any feature of the row. The second groups the rows
by the share of their predicted TTFT spent queued before admission (``predicted_ttft_queued_ms``):
where little queues, the error is the first token's own cost (front end and prefill), not the
benchmark's dynamics. The third asks of those rows (under 10 % queued) whether that cost is one
fixed latency, or one factor, per model (and GPU): each group's best offset (the median of
measured − predicted) or factor (the median of measured ÷ predicted) applied, what median error is
left. The fourth gives the best the share itself can do: one share per engine, per engine and
answer length, per engine and both lengths (the columns every row records), per engine and model,
per engine, model and answer length, per engine, model and GPU, per engine release too, per
benchmark campaign (those and the prompt and answer lengths) or per row, each chosen (on a grid of
0.05) to minimise its group's median TTFT error on the group's own rows, an in-sample bound on what
any rule for the share could reach, with the fraction of rows each puts within 20 %. The fifth does
the same per engine and per band of ``k``, the steps of prefill a wave's prompts fill
(``replay.wave_prompt_steps``: lanes per rank × ISL ÷ the engine's prefill budget), beside the
lock-step weight the shipped constants give at the band's median ``k``
(``replay.lock_step_weight``): how the weight the rows ask for grows with a wave's prompts
(docs/perf.md §3, "The lanes' jitter"). The sixth asks whether the weight's shape in ``k`` is what
holds the fit back: per engine, the best share and spread on a grid for the shipped
``k / (k + J)``, a steeper ``k^n / (k^n + J^n)`` (n = 1.5 to 4) and a hinge ``max(0, 1 − J / k)`` (arrivals
spread evenly over J steps queue only for what a wave's prompts fill beyond them), each as a share
× that fraction, and the median TTFT error each leaves: the in-sample bound of each shape, against
the shipped constants' error on the same rows."""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MEASUREMENTS = ROOT / "shared" / "calibration" / "serving_measurements.csv"
DEFAULT_MODELS = ROOT / "shared" / "models"
SHIPPED = Path(__file__).resolve().parents[1] / "src" / "tokenmill" / "perf" / "calibrated" / "params.json"
#: Bands of the queued share of the predicted TTFT (upper bounds).
QUEUED_BANDS = ((0.1, "< 10 %"), (0.5, "10–50 %"), (0.9, "50–90 %"), (math.inf, "≥ 90 %"))


def _evaluate(rows_csv: Path, models: Path, params: Path, out: Path, jobs: int) -> None:
    cmd = [sys.executable, "-m", "tokenmill.cli", "calibrate", "evaluate", "--measurements", str(rows_csv)]
    cmd += ["--models-dir", str(models), "--params", str(params), "--out", str(out), "--jobs", str(jobs), "--json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _read(path: Path) -> dict[str, tuple[float, float, float, float]]:
    """PRED.csv → id: (TTFT, queued, lock step, drifted), rows with every figure."""
    keys = ("predicted_ttft_ms", "predicted_ttft_queued_ms", "predicted_ttft_lock_step_ms", "predicted_ttft_drifted_ms")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [k for k in keys if k not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"error: {path} has no {', '.join(missing)} column (a calibrate evaluate of before 2026-12-01?)")
        out = {}
        for r in reader:
            if all(r[k] for k in keys):
                t, q, lk, dr = (float(r[k]) for k in keys)
                out[r["id"]] = (t, q, lk, dr)
        return out


def _ape(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0)


def _fixed_cost(pts: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """Median TTFT error of (model, GPU, measured, predicted) rows as predicted, and with each
    group's best offset (per model, per model and GPU) or factor (per model and GPU) applied."""

    def left(key: Any, factor: bool) -> float:
        groups: dict[Any, list[float]] = defaultdict(list)
        for p in pts:
            groups[key(p)].append(p[2] / p[3] if factor else p[2] - p[3])
        fix = {k: statistics.median(v) for k, v in groups.items()}
        return statistics.median(_ape(p[3] * fix[key(p)] if factor else p[3] + fix[key(p)], p[2]) for p in pts)

    return {
        "rows": len(pts),
        "as_predicted": statistics.median(_ape(p[3], p[2]) for p in pts),
        "offset_per_model": left(lambda p: p[0], False),
        "offset_per_model_gpu": left(lambda p: (p[0], p[1]), False),
        "factor_per_model_gpu": left(lambda p: (p[0], p[1]), True),
    }


#: Shares the fourth table tries for each group.
SHARE_GRID = tuple(i / 20 for i in range(21))
#: A row for the fourth table: engine, model, GPU, measured, lock step, drifted, and what else
#: names its campaign (engine release, ISL, OSL) and the row (id).
Regime = tuple[str, str, str, float, float, float, str, int, int, str]
#: Its groupings of the rows: the engine, with the lengths every row records (can they tell the
#: regimes apart?), then by model and finer; the last two are a benchmark campaign (one release's
#: sweep of one model on one GPU at one prompt and answer length) and each row alone.
SHARE_GROUPS: tuple[tuple[str, Any], ...] = (
    ("engine", lambda p: p[0]),
    ("engine and OSL", lambda p: (p[0], p[8])),
    ("engine, ISL and OSL", lambda p: (p[0], p[7], p[8])),
    ("engine and model", lambda p: (p[0], p[1])),
    ("engine, model and OSL", lambda p: (p[0], p[1], p[8])),
    ("engine, model and GPU", lambda p: (p[0], p[1], p[2])),
    ("engine, model, GPU and release", lambda p: (p[0], p[1], p[2], p[6])),
    ("campaign: those, ISL and OSL", lambda p: (p[0], p[1], p[2], p[6], p[7], p[8])),
    ("each row", lambda p: p[9]),
)


def _best_shares(pts: list[Regime]) -> dict[str, tuple[int, float, float, dict[Any, tuple[int, float]]]]:
    """Per grouping: (groups, median TTFT error over all rows with each group's best share, the
    fraction of rows it puts within 20 %, and each group's rows and best share)."""

    def err(p: Regime, s: float) -> float:
        return _ape(s * p[4] + (1.0 - s) * p[5], p[3])

    out = {}
    for name, key in SHARE_GROUPS:
        groups: dict[Any, list[Regime]] = defaultdict(list)
        for p in pts:
            groups[key(p)].append(p)
        best = {k: min(SHARE_GRID, key=lambda s: statistics.median(err(p, s) for p in v)) for k, v in groups.items()}
        each = {k: (len(groups[k]), best[k]) for k in sorted(groups, key=str)}
        errors = [err(p, best[key(p)]) for p in pts]
        out[name] = (len(groups), statistics.median(errors), sum(e <= 0.2 for e in errors) / len(errors), each)
    return out


#: Bands of a wave's prompt steps k (upper bounds) for the fifth table.
STEP_BANDS = (
    (1.0, "k ≤ 1"),
    (2.0, "1–2"),
    (4.0, "2–4"),
    (8.0, "4–8"),
    (16.0, "8–16"),
    (32.0, "16–32"),
    (64.0, "32–64"),
    (math.inf, "> 64"),
)


def _prompt_steps(row: dict[str, str]) -> float | None:
    """``k`` of an aggregated row as the replay computes it (None where its GPU is not in the catalog)."""
    from tokenmill.errors import TokenmillError
    from tokenmill.hardware import load_gpu
    from tokenmill.perf.replay import engine_policy, wave_prompt_steps
    from tokenmill.plan import Layout

    try:
        gpu = load_gpu(row["system"].removesuffix("_sxm"))
        chunk = engine_policy(row["backend"], gpu, Layout()).chunk_tokens  # one rank's prefill budget
    except TokenmillError:
        return None
    dp = int(row.get("attention_dp_size") or 1)
    return wave_prompt_steps(int(row["batch_size"]), dp, int(row["isl"]), chunk)


def _by_prompt_steps(
    pts: list[tuple[str, float, float, float, float]], params: Path
) -> dict[tuple[str, str], tuple[int, float, float, float]]:
    """(engine, band of k) → (rows, the band's best share on a 0.05 grid, its median k, the shipped
    constants' lock-step weight at that k), from (engine, k, measured, lock step, drifted)."""
    from tokenmill.perf.calibrated import load_table
    from tokenmill.perf.replay import lock_step_weight

    table = load_table(params)
    groups: dict[tuple[str, str], list[tuple[str, float, float, float, float]]] = defaultdict(list)
    for p in pts:
        groups[(p[0], next(name for top, name in STEP_BANDS if p[1] <= top))].append(p)
    order = {name: i for i, (_, name) in enumerate(STEP_BANDS)}
    out = {}
    for key in sorted(groups, key=lambda k: (k[0], order[k[1]])):
        v = groups[key]
        best = min(SHARE_GRID, key=lambda s: statistics.median(_ape(s * p[3] + (1 - s) * p[4], p[2]) for p in v))
        k = statistics.median(p[1] for p in v)
        # the share and the jitter are engine constants: any fitted GPU resolves the engine's
        out[key] = (len(v), best, k, lock_step_weight(table.resolve("h100", key[0])[0], k))
    return out


#: The shapes of the lock-step fraction in k the sixth table compares: (name, exponents n, f(k, J, n)).
SHAPES: tuple[tuple[str, tuple[float, ...], Any], ...] = (
    ("k / (k + J) (shipped)", (1.0,), lambda k, j, n: k / (k + j)),
    ("k^n / (k^n + J^n)", (1.5, 2.0, 3.0, 4.0), lambda k, j, n: k**n / (k**n + j**n)),
    ("max(0, 1 − J / k)", (1.0,), lambda k, j, n: max(0.0, 1.0 - j / k)),
)
#: The spreads J (steps) the sixth table tries.
SPREAD_GRID = (0.01, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)


def _by_shape(
    pts: list[tuple[str, float, float, float, float]], params: Path
) -> dict[str, dict[str, tuple[int, float, float, float, float, float]]]:
    """engine → shape → (rows, the shipped constants' median TTFT error on them, the shape's best
    median error, its share, spread and exponent), from (engine, k, measured, lock step, drifted)."""
    from tokenmill.perf.calibrated import load_table
    from tokenmill.perf.replay import lock_step_weight

    table = load_table(params)
    by_engine: dict[str, list[tuple[str, float, float, float, float]]] = defaultdict(list)
    for p in pts:
        by_engine[p[0]].append(p)
    out: dict[str, dict[str, tuple[int, float, float, float, float, float]]] = {}
    for engine in sorted(by_engine):
        v = by_engine[engine]
        shipped_params = table.resolve("h100", engine)[0]
        shipped = statistics.median(
            _ape(w * p[3] + (1 - w) * p[4], p[2]) for p in v for w in (lock_step_weight(shipped_params, p[1]),)
        )
        out[engine] = {}
        for name, exponents, frac in SHAPES:
            best = (math.inf, 0.0, 0.0, 0.0)
            for n in exponents:
                for j in SPREAD_GRID:
                    fr = [frac(p[1], j, n) for p in v]
                    for s in SHARE_GRID:
                        mixed = zip(v, fr, strict=True)
                        e = statistics.median(_ape(s * f * p[3] + (1 - s * f) * p[4], p[2]) for p, f in mixed)
                        best = min(best, (e, s, j, n))
            out[engine][name] = (len(v), shipped, *best)
    return out


def _band(queued_share: float) -> str:
    return next(name for top, name in QUEUED_BANDS if queued_share < top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--predictions", type=Path, help="PRED.csv of calibrate evaluate (default: run it)")
    ap.add_argument("--measurements", type=Path, default=DEFAULT_MEASUREMENTS)
    ap.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS)
    ap.add_argument("--params", type=Path, default=SHIPPED)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    args = ap.parse_args()

    with args.measurements.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "agg"]
    if args.predictions is not None:
        preds = _read(args.predictions)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows_csv, out = Path(tmp) / "agg.csv", Path(tmp) / "pred.csv"
            with rows_csv.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            if not args.json:
                print(f"calibrate evaluate on {len(rows):,} aggregated rows ...", file=sys.stderr)
            _evaluate(rows_csv, args.models_dir, args.params, out, args.jobs)
            preds = _read(out)

    # (measured, predicted, queued, lock step, drifted) by engine
    by_engine: dict[str, list[tuple[float, float, float, float, float]]] = defaultdict(list)
    # where little queues: (model, GPU, measured, predicted) by engine
    little: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
    # (engine, model, GPU, measured, lock step, drifted, release, ISL, OSL, id) of every row
    regimes: list[Regime] = []
    # (engine, a wave's prompt steps, measured, lock step, drifted) of every row
    stepped: list[tuple[str, float, float, float, float]] = []
    for r in rows:
        if r["id"] in preds and r.get("silicon_ttft_ms"):
            t, q, lk, dr = preds[r["id"]]
            by_engine[r["backend"]].append((float(r["silicon_ttft_ms"]), t, q, lk, dr))
            regimes.append(
                (
                    r["backend"],
                    r["model_path"],
                    r["system"],
                    float(r["silicon_ttft_ms"]),
                    lk,
                    dr,
                    r.get("backend_version") or "unversioned",
                    int(r["isl"]),
                    int(r["osl"]),
                    r["id"],
                )
            )
            k = _prompt_steps(r)
            if k is not None:
                stepped.append((r["backend"], k, float(r["silicon_ttft_ms"]), lk, dr))
            if q / t < QUEUED_BANDS[0][0]:
                little[r["backend"]].append((r["model_path"], r["system"], float(r["silicon_ttft_ms"]), t))
    by_engine["all"] = [x for k in sorted(by_engine) for x in by_engine[k]]
    table: dict[str, dict[str, Any]] = {}
    queued: dict[str, dict[str, Any]] = {}
    for engine, pts in by_engine.items():
        above = [m / max(lk, dr) for m, _, _, lk, dr in pts if m > max(lk, dr)]
        below = [m / min(lk, dr) for m, _, _, lk, dr in pts if m < min(lk, dr)]
        table[engine] = {
            "rows": len(pts),
            "above_both": len(above) / len(pts),
            "above_median_ratio": statistics.median(above) if above else None,
            "below_both": len(below) / len(pts),
            "below_median_ratio": statistics.median(below) if below else None,
            "between": 1.0 - (len(above) + len(below)) / len(pts),
            "ttft_median_ape": statistics.median(_ape(t, m) for m, t, _, _, _ in pts),
            "ttft_median_ape_lock_step": statistics.median(_ape(lk, m) for m, _, _, lk, _ in pts),
            "ttft_median_ape_drift": statistics.median(_ape(dr, m) for m, _, _, _, dr in pts),
        }
        bands: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for m, t, q, _, _ in pts:
            bands[_band(q / t)].append((m, t))
        queued[engine] = {
            name: {
                "rows": len(bands[name]),
                "ttft_median_ape": statistics.median(_ape(t, m) for m, t in bands[name]),
                "median_measured_over_predicted": statistics.median(m / t for m, t in bands[name]),
            }
            for _, name in QUEUED_BANDS
            if bands[name]
        }
    fixed = {engine: _fixed_cost(pts) for engine, pts in sorted(little.items())}
    shares = _best_shares(regimes)
    steps = _by_prompt_steps(stepped, args.params)
    shapes = _by_shape(stepped, args.params)
    if args.json:
        best = {
            name: {
                "groups": n,
                "ttft_median_ape": e,
                "within_20_percent": w,
                "shares": {" | ".join(map(str, [k] if isinstance(k, str) else k)): b for k, (_, b) in each.items()},
            }
            for name, (n, e, w, each) in shares.items()
            if name != "each row"
        }
        by_steps = {
            f"{e} | {band}": {"rows": n, "best_share": b, "median_k": k, "shipped_weight": w}
            for (e, band), (n, b, k, w) in steps.items()
        }
        out = {
            "bracket": table,
            "by_queued_share": queued,
            "little_queued_fixed_cost": fixed,
            "best_share_per": best,
            "best_share_by_prompt_steps": by_steps,
            "best_weight_shape": {
                f"{e} | {name}": {
                    "rows": n,
                    "shipped_ttft_median_ape": sh,
                    "ttft_median_ape": err,
                    "share": s,
                    "spread_steps": j,
                    "exponent": x,
                }
                for e, each in shapes.items()
                for name, (n, sh, err, s, j, x) in each.items()
            },
        }
        print(json.dumps(out, indent=2))
        return
    print("| engine | rows | above both | measured ÷ the higher | below both | measured ÷ the lower | between |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for engine, t in table.items():
        print(
            f"| {engine} | {t['rows']:,} | {100 * t['above_both']:.0f} % | {t['above_median_ratio'] or 0:.2f} | "
            f"{100 * t['below_both']:.0f} % | {t['below_median_ratio'] or 0:.2f} | {100 * t['between']:.0f} % |"
        )
    t = table["all"]
    print(
        f"TTFT median error {100 * t['ttft_median_ape']:.1f} %; with lock step alone "
        f"{100 * t['ttft_median_ape_lock_step']:.1f} %, drift alone {100 * t['ttft_median_ape_drift']:.1f} %"
    )
    print()
    print("| engine | queued share of the predicted TTFT | rows | TTFT median error | measured ÷ predicted (median) |")
    print("|---|---|---:|---:|---:|")
    for engine, bands_out in queued.items():
        for name, b in bands_out.items():
            print(
                f"| {engine} | {name} | {b['rows']:,} | {100 * b['ttft_median_ape']:.1f} % | "
                f"{b['median_measured_over_predicted']:.2f} |"
            )
    print()
    print(
        "| engine | rows under 10 % queued | TTFT median error | with an offset per model | "
        "per model and GPU | with a factor per model and GPU |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for engine, f in fixed.items():
        print(
            f"| {engine} | {f['rows']:,} | {100 * f['as_predicted']:.1f} % | {100 * f['offset_per_model']:.1f} % | "
            f"{100 * f['offset_per_model_gpu']:.1f} % | {100 * f['factor_per_model_gpu']:.1f} % |"
        )
    print()
    print("| one burst share per (each group's best, in sample) | groups | TTFT median error | rows within 20 % |")
    print("|---|---:|---:|---:|")
    for name, (n, e, w, _) in shares.items():
        print(f"| {name} | {n:,} | {100 * e:.1f} % | {100 * w:.1f} % |")
    print()
    print("| engine | model | rows | best share |")
    print("|---|---|---:|---:|")
    for (engine, model), (n, b) in shares["engine and model"][3].items():
        print(f"| {engine} | {model} | {n:,} | {b:.2f} |")
    print()
    print("| engine | a wave's prompt steps k | rows | best share | median k | shipped lock-step weight there |")
    print("|---|---|---:|---:|---:|---:|")
    for (engine, band), (n, b, k, w) in steps.items():
        print(f"| {engine} | {band} | {n:,} | {b:.2f} | {k:.2f} | {w:.2f} |")
    print()
    print("| engine | lock-step fraction in k | rows | shipped TTFT error | best TTFT error | share | spread J | n |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for engine, each in shapes.items():
        for name, (n, sh, err, s, j, x) in each.items():
            print(f"| {engine} | {name} | {n:,} | {100 * sh:.1f} % | {100 * err:.1f} % | {s:.2f} | {j:g} | {x:g} |")


if __name__ == "__main__":
    main()
