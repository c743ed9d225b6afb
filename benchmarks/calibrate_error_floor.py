"""Where the prediction error lives: what a constant per group of rows could remove at best.

Run: ``.venv/bin/python benchmarks/calibrate_error_floor.py --predictions PRED.csv
[--measurements FILE.csv] [--json]`` on the output of ``tokenmill calibrate evaluate``.

For each grouping of the fully specified rows (engine release; release and GPU; model, GPU and
engine; a benchmark campaign = release, model, GPU, ISL and OSL, all layouts and concurrencies),
every row's log error has the median log error of the other rows of its group removed (what one
multiplicative constant per group, fitted on the rest of the group, could do) and the median
absolute percentage error of what is left is printed. What a constant per campaign
leaves is the shape of the curves within a campaign (TTFT against concurrency and layout), which
no per-engine, per-release or per-model constant reaches.

It also prints how much rows that repeat a configuration (every column but the id, the source
and the results) disagree with each other: a floor the file itself sets.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from tokenmill.perf.calibrate import _row_fully_specified

DEFAULT_MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "serving_measurements.csv"

Row = dict[str, str]
GROUPINGS: dict[str, Callable[[Row], tuple[str, ...]]] = {
    "engine release": lambda r: (r["backend"], r["backend_version"]),
    "release, GPU": lambda r: (r["backend"], r["backend_version"], r["system"]),
    "model, GPU, engine": lambda r: (r["model_path"], r["system"], r["backend"]),
    "release, model, GPU, ISL, OSL": lambda r: (
        r["backend"],
        r["backend_version"],
        r["model_path"],
        r["system"],
        r["isl"],
        r["osl"],
    ),
}
_RESULTS = {"id", "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms"}


def _debiased_median_ape(errors: list[tuple[tuple[str, ...], float]]) -> float:
    """Median over rows of |exp(e − m) − 1|, m the median log error of the *other* rows of the row's
    group (leave one out: what a constant fitted on the rest of the group would leave; a row alone
    in its group keeps its error)."""
    by: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for key, e in errors:
        by[key].append(e)
    out = []
    for key, e in errors:
        others = list(by[key])
        others.remove(e)
        m = statistics.median(others) if others else 0.0
        out.append(abs(math.exp(e - m) - 1))
    return statistics.median(out)


def _concurrency(r: Row) -> str:
    for part in r["silicon_data_source"].split(";"):
        k, _, v = part.strip().partition("=")
        if k == "silicon_concurrency":
            return v
    return r.get("batch_size", "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--predictions", required=True, help="PRED.csv written by `tokenmill calibrate evaluate`")
    ap.add_argument("--measurements", default=str(DEFAULT_MEASUREMENTS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.measurements, newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    with open(args.predictions, newline="") as fh:
        predictions = list(csv.DictReader(fh))
    scored: list[tuple[Row, float, float]] = []
    for p in predictions:
        r = rows.get(p["id"])
        if r is None or not _row_fully_specified(r) or not p["predicted_ttft_ms"] or not p["predicted_tpot_ms"]:
            continue
        et = math.log(float(p["predicted_ttft_ms"]) / float(r["silicon_ttft_ms"]))
        ep = math.log(float(p["predicted_tpot_ms"]) / float(r["silicon_tpot_ms"]))
        scored.append((r, et, ep))
    out: dict[str, object] = {"rows": len(scored), "groupings": {}}
    for name, key in GROUPINGS.items():
        groups = {key(r) for r, _, _ in scored}
        out["groupings"][name] = {  # type: ignore[index]
            "groups": len(groups),
            "ttft_median_ape": _debiased_median_ape([(key(r), et) for r, et, _ in scored]),
            "tpot_median_ape": _debiased_median_ape([(key(r), ep) for r, _, ep in scored]),
        }
    # repeated configurations: every column but the results and the provenance, concurrency included
    same: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for r, _, _ in scored:
        same[(*(v for k, v in sorted(r.items()) if k not in _RESULTS), _concurrency(r))].append(r)
    spreads = []
    repeated = 0
    for group in same.values():
        if len(group) < 2:
            continue
        repeated += len(group)
        vals = [math.log(float(r["silicon_ttft_ms"])) for r in group]
        med = statistics.median(vals)
        spreads += [abs(math.exp(v - med) - 1) for v in vals]
    out["repeats"] = {
        "rows": repeated,
        "groups": sum(1 for g in same.values() if len(g) > 1),
        "ttft_median_spread": statistics.median(spreads) if spreads else None,
        "ttft_p90_spread": sorted(spreads)[int(0.9 * (len(spreads) - 1))] if spreads else None,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{len(scored)} fully specified rows with predictions")
    print("| constant per | groups | TTFT median | TPOT median |")
    print("|---|---:|---:|---:|")
    for name, g in out["groupings"].items():  # type: ignore[attr-defined]
        print(f"| {name} | {g['groups']} | {100 * g['ttft_median_ape']:.1f} % | {100 * g['tpot_median_ape']:.1f} % |")
    rep = out["repeats"]
    assert isinstance(rep, dict)
    spread = rep["ttft_median_spread"]
    print(
        f"repeated configurations: {rep['rows']} rows in {rep['groups']} groups, "
        f"TTFT off their group's median by {100 * spread:.1f} % (median), {100 * rep['ttft_p90_spread']:.1f} % (p90)"
        if spread is not None
        else "no repeated configurations"
    )


if __name__ == "__main__":
    main()
