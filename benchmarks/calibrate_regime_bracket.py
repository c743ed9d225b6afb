"""Do the two replays bracket the measured TTFT? The reach of ``burst_share``.

Run: ``.venv/bin/python benchmarks/calibrate_regime_bracket.py [--measurements FILE.csv]
[--models-dir DIR] [--params FILE.json] [--jobs 2] [--json]`` (about 3 minutes with two jobs on two cores).

A closed-loop point is predicted as a mixture of two replays (docs/perf.md section 2): lanes in
lock step (a burst from an idle server, every wave a burst again) and lanes drifted apart, mixed
by the engine's fitted ``burst_share``. Whatever the share, a row's predicted TTFT lies between
the two. This script runs ``tokenmill calibrate evaluate`` on the aggregated rows twice, with
every engine's share set to 1 (lock step alone) and to ~0 (drift alone), and counts, by engine,
the rows whose measured TTFT lies above both replays, below both, or between them: only the
last can be reached by a better share, per engine, per row or from any feature of the row. The
other constants are the ones given (the shipped ones by default).
"""

from __future__ import annotations

import argparse
import csv
import json
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
DRIFT_ONLY = 1e-12  # the constants refuse a share of 0; 1e-12 leaves the drifted replay alone


def _evaluate(rows_csv: Path, models: Path, params: Path, out: Path, jobs: int) -> dict[str, tuple[float, float]]:
    cmd = [sys.executable, "-m", "tokenmill.cli", "calibrate", "evaluate", "--measurements", str(rows_csv)]
    cmd += ["--models-dir", str(models), "--params", str(params), "--out", str(out), "--jobs", str(jobs), "--json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with out.open(newline="") as f:
        return {
            r["id"]: (float(r["predicted_ttft_ms"]), float(r["predicted_tpot_ms"]))
            for r in csv.DictReader(f)
            if r["predicted_ttft_ms"]
        }


def _ape(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", type=Path, default=DEFAULT_MEASUREMENTS)
    ap.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS)
    ap.add_argument("--params", type=Path, default=SHIPPED)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    args = ap.parse_args()

    with args.measurements.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "agg"]
    constants = json.loads(args.params.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows_csv = work / "agg.csv"
        with rows_csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        preds = {}
        for name, share in (("lock step", 1.0), ("drift", DRIFT_ONLY)):
            for backend in constants["backends"].values():
                backend["burst_share"] = share
            params = work / f"{share}.json"
            params.write_text(json.dumps(constants))
            if not args.json:
                print(f"calibrate evaluate on {len(rows):,} aggregated rows, {name} alone ...", file=sys.stderr)
            preds[name] = _evaluate(rows_csv, args.models_dir, params, work / f"{share}.csv", args.jobs)

    by_engine: dict[str, list[tuple[float, float, float]]] = defaultdict(list)  # (measured, lock, drift)
    for r in rows:
        if r["id"] in preds["lock step"] and r["id"] in preds["drift"]:
            m = float(r["silicon_ttft_ms"])
            by_engine[r["backend"]].append((m, preds["lock step"][r["id"]][0], preds["drift"][r["id"]][0]))
    by_engine["all"] = [x for k in sorted(by_engine) for x in by_engine[k]]
    table: dict[str, dict[str, Any]] = {}
    for engine, pts in by_engine.items():
        above = [m / max(lk, dr) for m, lk, dr in pts if m > max(lk, dr)]
        below = [m / min(lk, dr) for m, lk, dr in pts if m < min(lk, dr)]
        table[engine] = {
            "rows": len(pts),
            "above_both": len(above) / len(pts),
            "above_median_ratio": statistics.median(above) if above else None,
            "below_both": len(below) / len(pts),
            "below_median_ratio": statistics.median(below) if below else None,
            "between": 1.0 - (len(above) + len(below)) / len(pts),
            "ttft_median_ape_lock_step": statistics.median(_ape(lk, m) for m, lk, _ in pts),
            "ttft_median_ape_drift": statistics.median(_ape(dr, m) for m, _, dr in pts),
        }
    if args.json:
        print(json.dumps(table, indent=2))
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
        f"TTFT median error with lock step alone {100 * t['ttft_median_ape_lock_step']:.1f} %, "
        f"drift alone {100 * t['ttft_median_ape_drift']:.1f} %"
    )


if __name__ == "__main__":
    main()
