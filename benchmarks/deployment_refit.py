"""A few measured points of one deployment, then the rest of it: ``calibrate fit --start shipped``
on three rows of a deployment, scored on that deployment's other rows.

Run: ``.venv/bin/python benchmarks/deployment_refit.py [--points 3] [--shapes 1] [--anchor 0.03]
[--free all|engine|KEY,...] [--min-rows 6] [--rounds 2] [--sweeps 20] [--ceiling 0.95] [--jobs 2]
[--figure OUT] [--json]`` (about seven minutes on this project's 2-core machine).

The shipped constants are one set for every deployment of a GPU and an engine, and the calibration
file's first tokens differ by campaign more than any of its columns says (docs/perf.md, "Why the
misses"). A serving engineer has something the file does not: their own deployment, which they
can measure. This benchmark asks what a few of its points buy. A *deployment* is the calibration
file's aggregated, measured rows that share an engine and its release, a model, a GPU, a
precision, the weight formats and the layout (tp, pp, attention DP, EP); those with at least
``--min-rows`` rows are scored. For each:

1. the *measured points* are the ones a user would run first: the deployment's most common
   prompt and answer lengths (the ``--shapes`` most common) at ``--points`` concurrencies spread
   over those it ran (lowest, highest, and between);
2. ``calibrate fit --start shipped`` on those rows alone (``perf.calibrate.fit`` from the shipped
   table, two rounds of ``--sweeps`` sweeps, each constant pulled towards its shipped value by
   ``--anchor``, no kernel of the rows above ``--ceiling`` × its peak, as the command does;
   every other GPU and engine keeps its shipped constants);
3. every *other* row of the deployment (other concurrencies and other lengths; a row that repeats
   a measured point's lengths and lanes, the same measurement in another source file, is left out)
   is predicted with the shipped constants and with the refitted ones.

It prints the median absolute percentage error of TTFT and TPOT over all those rows, before and
after, overall and by engine: what `predict` is worth on a deployment after three benchmark runs
of it, against the issue's targets for the shipped constants (TTFT ≤ 20 %, TPOT ≤ 12 %).

With ``--accuracy FILE`` (an accuracy.json measured with the shipped constants; only with the
settings ``calibrate fit --start`` uses) the refitted predictions of those rows become that file's
refit error bands, at the measured lengths and at other lengths (``perf.accuracy``): the band
``predict --params`` shows for constants refitted on a deployment's own runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

from tokenmill.cli.calibrate_cmd import CEILING, START_ANCHOR, START_SWEEPS
from tokenmill.perf.accuracy import Scored, fingerprint, load_accuracy, measure, scored_rows
from tokenmill.perf.calibrate import fit
from tokenmill.perf.calibrated import load_table, shipped_path
from tokenmill.perf.measurements import read_measurements, row_concurrency
from tokenmill.perf.params import ENGINE_FIELDS, GLOBAL_FIELDS, GPU_FIELDS
from tokenmill.perf.row_prediction import fitting_rows, predict_rows

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "calibration" / "serving_measurements.csv"
MODELS = ROOT.parent / "shared" / "models"
#: The columns that make rows one deployment (the benchmark point, lengths and lanes, aside)
DEPLOYMENT = (
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "gemm_quant_mode",
    "moe_quant_mode",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
)


def deployments(rows: list[dict[str, str]], min_rows: int) -> dict[tuple[str, ...], list[dict[str, str]]]:
    """The aggregated rows with a measurement, grouped by ``DEPLOYMENT``; groups of ``min_rows`` or more."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in fitting_rows(rows):
        if (row.get("mode") or "").strip().lower() == "agg" and row_concurrency(row):
            groups[tuple((row.get(k) or "").strip() for k in DEPLOYMENT)].append(row)
    return {k: v for k, v in groups.items() if len(v) >= min_rows}


def point(row: dict[str, str]) -> tuple[int, int, int]:
    return int(row["isl"]), int(row["osl"]), int(row_concurrency(row) or 0)


def measured_points(group: list[dict[str, str]], points: int, shapes: int = 1) -> list[dict[str, str]]:
    """A user's first runs: the ``shapes`` most common prompt and answer lengths (the shortest
    prompt first among ties), each at ``points`` concurrencies spread from the lowest to the
    highest it ran (one row per concurrency)."""
    counts = Counter(point(r)[:2] for r in group)
    chosen = sorted(counts, key=lambda s: (-counts[s], s))[:shapes]
    out: list[dict[str, str]] = []
    for shape in chosen:
        by_lanes = {point(r)[2]: r for r in sorted(group, key=lambda r: r["id"]) if point(r)[:2] == shape}
        lanes = sorted(by_lanes)
        if len(lanes) <= points:
            out += [by_lanes[c] for c in lanes]
            continue
        picks = sorted({round(i * (len(lanes) - 1) / (points - 1)) for i in range(points)})
        out += [by_lanes[lanes[i]] for i in picks]
    return out


def ape(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or not meas else abs(pred / meas - 1.0)


def one(
    args: tuple[tuple[str, ...], list[dict[str, str]], int, str, tuple[str, ...], int, float, int, int, float | None],
) -> dict[str, Any]:
    key, group, points, models, fixed, shapes, anchor, rounds, sweeps, ceiling = args
    shipped = load_table(shipped_path())
    out: dict[str, Any] = {"deployment": dict(zip(DEPLOYMENT, key, strict=True))}
    shipped_preds = {p.id: p for p in predict_rows(group, models, shipped)}
    group = [r for r in group if shipped_preds[r["id"]].ttft_ms is not None]  # the rows the model can replay
    fit_rows = measured_points(group, points, shapes) if group else []
    seen = {point(r) for r in fit_rows}
    held = [r for r in group if point(r) not in seen]
    measured_lengths = {p[:2] for p in seen}
    out["fit"] = [r["id"] for r in fit_rows]
    if len(fit_rows) < 2 or not held:
        return out | {"skipped": "fewer than two measured points or nothing left to predict"}
    fitted, _, _ = fit(
        fit_rows, models, shipped, rounds=rounds, sweeps=sweeps, fixed=fixed, anchor=anchor, ceiling=ceiling
    )
    before = [shipped_preds[r["id"]] for r in held]
    after = predict_rows(held, models, fitted)
    out["rows"] = [
        {
            "id": b.id,
            "same_lengths": point(r)[:2] in measured_lengths,
            "ttft_before": ape(b.ttft_ms, b.measured_ttft_ms),
            "ttft_after": ape(a.ttft_ms, a.measured_ttft_ms),
            "tpot_before": ape(b.tpot_ms, b.measured_tpot_ms),
            "tpot_after": ape(a.tpot_ms, a.measured_tpot_ms),
            # the refitted prediction as an error band scores it (perf.accuracy; None: not scored)
            "scored": next((asdict(x) for x in scored_rows([a])), None),
        }
        for r, b, a in zip(held, before, after, strict=True)
    ]
    return out


def medians(rows: list[dict[str, Any]]) -> dict[str, float | int]:
    both = [r for r in rows if None not in (r["ttft_before"], r["ttft_after"], r["tpot_before"], r["tpot_after"])]
    stats: dict[str, float | int] = {"rows": len(both)}
    for k in ("ttft_before", "ttft_after", "tpot_before", "tpot_after"):
        stats[k] = float(np.median([r[k] for r in both])) * 100 if both else float("nan")
        stats[f"{k}_p90"] = float(np.percentile([r[k] for r in both], 90)) * 100 if both else float("nan")
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--models-dir", type=Path, default=MODELS)
    ap.add_argument("--points", type=int, default=3, help="measured points a deployment is refitted on")
    ap.add_argument("--shapes", type=int, default=1, help="prompt and answer lengths measured (the commonest)")
    ap.add_argument("--min-rows", type=int, default=6, help="rows a deployment needs to be scored")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--free",
        default="all",
        help="the constants the refit moves: all (as calibrate fit), engine, or a comma list of names",
    )
    ap.add_argument("--figure", type=Path, default=None, help="OUT: the errors' distributions in OUT.png and OUT.svg")
    ap.add_argument(
        "--anchor",
        type=float,
        default=START_ANCHOR,
        help=f"pull towards the shipped values, per row (default {START_ANCHOR:g}, calibrate fit --start's; "
        "0: towards the priors)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="replay-then-fit rounds (calibrate fit's default 2)")
    ap.add_argument(
        "--sweeps",
        type=int,
        default=START_SWEEPS,
        help=f"sweeps per round (default {START_SWEEPS}, calibrate fit --start's)",
    )
    ap.add_argument(
        "--ceiling",
        type=float,
        default=CEILING,
        help=f"the highest fraction of a kernel's peak a refit may set (default {CEILING:g}, calibrate fit's; 0: none)",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--accuracy",
        type=Path,
        default=None,
        help="accuracy.json (of the shipped constants) to write the refit error bands to",
    )
    args = ap.parse_args()
    if args.points < 2 or args.shapes < 1 or not args.anchor >= 0 or args.rounds < 1 or args.sweeps < 1:
        ap.error("--points must be 2 or more, --shapes, --rounds and --sweeps 1 or more, --anchor 0 or more")
    accuracy = None
    if args.accuracy is not None:
        settings = (args.points, args.shapes, args.anchor, args.free, args.rounds, args.sweeps, args.ceiling)
        if settings != (3, 1, START_ANCHOR, "all", 2, START_SWEEPS, CEILING):
            ap.error("--accuracy: the bands describe `calibrate fit --start`'s refit: run with the default settings")
        accuracy = load_accuracy(args.accuracy)
        if accuracy is None or accuracy.params_sha256 != fingerprint(shipped_path()):
            ap.error(f"--accuracy {args.accuracy}: not measured with the shipped constants")
    rows, silicon = read_measurements(args.csv)
    if not silicon:
        ap.error("--csv needs the silicon_ttft_ms and silicon_tpot_ms columns")
    groups = deployments(rows, args.min_rows)
    every_field = (*GPU_FIELDS, *ENGINE_FIELDS, *GLOBAL_FIELDS)
    free = {"all": every_field, "engine": ENGINE_FIELDS}.get(args.free) or tuple(args.free.split(","))
    unknown = sorted(set(free) - set(every_field))
    if unknown:
        ap.error(f"--free: unknown constants {', '.join(unknown)}")
    fixed = tuple(k for k in every_field if k not in free)
    work = [
        (
            k,
            v,
            args.points,
            str(args.models_dir),
            fixed,
            args.shapes,
            args.anchor,
            args.rounds,
            args.sweeps,
            args.ceiling or None,
        )
        for k, v in sorted(groups.items())
    ]
    t0 = time.time()
    results: list[dict[str, Any]] = []
    with Pool(max(1, args.jobs)) as pool:
        for i, res in enumerate(pool.imap(one, work), 1):
            results.append(res)
            if not args.json and sys.stderr.isatty():
                print(f"\r{i}/{len(work)} deployments", end="", file=sys.stderr, flush=True)
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    scored = [r for r in results if "rows" in r]
    every = [row for r in scored for row in r["rows"]]
    by_engine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in scored:
        by_engine[r["deployment"]["backend"]] += r["rows"]
    summary = {
        "deployments": len(scored),
        "skipped_deployments": len(results) - len(scored),
        "points": args.points,
        "shapes": args.shapes,
        "anchor": args.anchor,
        "free": args.free,
        "rounds": args.rounds,
        "sweeps": args.sweeps,
        "ceiling": args.ceiling,
        "overall": medians(every),
        "by_engine": {e: medians(v) for e, v in sorted(by_engine.items())},
        "same_lengths": medians([r for r in every if r["same_lengths"]]),
        "other_lengths": medians([r for r in every if not r["same_lengths"]]),
        "seconds": round(time.time() - t0, 1),
    }
    measured = f"{args.points} points" + (f" at each of {args.shapes} lengths" if args.shapes > 1 else "")
    summary["measured"] = measured
    if args.figure is not None:
        from tokenmill.report.calibration_figures import error_cdf_figure

        def pct(key: str) -> list[float]:
            return [r[key] * 100 for r in every if None not in (r["ttft_before"], r["ttft_after"])]

        error_cdf_figure(
            {
                m: {"shipped constants": pct(f"{k}_before"), f"refitted on {measured}": pct(f"{k}_after")}
                for m, k in (("TTFT", "ttft"), ("TPOT", "tpot"))
            },
            {"TTFT": 20.0, "TPOT": 12.0},
            [Path(f"{args.figure}.png"), Path(f"{args.figure}.svg")],
            f"{summary['deployments']} deployments of the calibration file, each refitted (calibrate fit "
            f"--start shipped) on {measured} of its own: its {summary['overall']['rows']:,} other rows",
        )
    if accuracy is not None:
        for same in (True, False):
            bands = measure(Scored(**row["scored"]) for row in every if row["scored"] and row["same_lengths"] == same)
            if same:
                accuracy.refit_same_lengths = bands
            else:
                accuracy.refit_other_lengths = bands
        accuracy.meta["refit_command"] = "benchmarks/deployment_refit.py --accuracy FILE"
        accuracy.meta["refit_rows_scored"] = {
            "same_lengths": accuracy.refit_same_lengths["all"].rows,
            "other_lengths": accuracy.refit_other_lengths["all"].rows,
        }
        accuracy.write(args.accuracy)
    if args.json:
        print(json.dumps({"summary": summary, "deployments": results}, indent=2))
        return 0
    print(
        f"{summary['deployments']} deployments ({summary['skipped_deployments']} skipped), each refitted on "
        f"{measured} of its own, scored on its other rows ({summary['seconds']} s)"
    )
    print("median (p90) absolute percentage error")
    print(f"{'':12} {'rows':>6} {'TTFT shipped':>16} {'TTFT refit':>16} {'TPOT shipped':>16} {'TPOT refit':>16}")
    parts = [("overall", summary["overall"]), *summary["by_engine"].items()]
    parts += [("same ISL/OSL", summary["same_lengths"]), ("other", summary["other_lengths"])]
    for name, s in parts:
        keys = ("ttft_before", "ttft_after", "tpot_before", "tpot_after")
        cells = [f"{s[k]:.1f}% ({s[k + '_p90']:.0f}%)" for k in keys]
        print(f"{name:12} {s['rows']:>6} " + " ".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
