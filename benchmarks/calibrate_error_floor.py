"""Where the prediction error lives: what a constant per group of rows could remove at best.

Run: ``.venv/bin/python benchmarks/calibrate_error_floor.py --predictions PRED.csv
[--measurements FILE.csv] [--json] [--split-figure FILE.png|.svg ...]`` on the output of
``tokenmill calibrate evaluate``.

For each grouping of the fully specified rows (engine release; release and GPU; model, GPU and
engine; a benchmark campaign = release, model, GPU, ISL and OSL, all layouts and concurrencies),
every row's log error has the median log error of the other rows of its group removed (what one
multiplicative constant per group, fitted on the rest of the group, could do) and the median
absolute percentage error of what is left is printed. What a constant per campaign
leaves is the shape of the curves within a campaign (TTFT against concurrency and layout), which
no per-engine, per-release or per-model constant reaches.

It also prints how much rows that repeat a configuration (every column but the id, the source
and the results) disagree with each other: a floor the file itself sets.

**TPOT split.** Where a configuration was measured at the same concurrency with 128 and 512 output
tokens (nothing else different), its mean TPOT is read as ``d + H / (OSL − 1)``: ``d`` the decode
step (the context hardly changes between the two), ``H`` the time a request's decode spends
behind other requests' prompts over its life (prefill steps, or prefill chunks riding in its
decode steps). Two lengths give both, for the measurements and for the predictions alike; a
256-token row, where there is one, checks the form. By engine release: how far the predicted
decode step and the predicted interference are from the measured ones.

**First-token lines.** Where an aggregated configuration was measured at concurrency ≤ 4 with
1,024- and 8,192-token prompts (1,024 output tokens, all else equal), little queues and its mean
TTFT is read as a line ``a + b × ISL``: ``a`` what a first token costs whatever the prompt (front
end, scheduling, fixed per-step costs), ``b`` the cost per prompt token. By engine: how far the
predicted slope and intercept are from the measured ones.
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

from tokenmill.perf.row_prediction import row_fully_specified
from tokenmill.report.calibration_figures import SplitPoint, tpot_split_figure

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


SPLIT_OSL = (128, 512)


def _split(t_short: float, t_long: float) -> tuple[float, float]:
    """(d, H) from mean TPOTs at SPLIT_OSL: TPOT = d + H / (OSL − 1)."""
    a, b = (n - 1 for n in SPLIT_OSL)
    h = (t_short - t_long) / (1 / a - 1 / b)
    return t_long - h / b, h


def split_points(
    scored: list[tuple[Row, float, float]], predicted: dict[str, float]
) -> list[tuple[SplitPoint, float, Row]]:
    """Every configuration measured at both SPLIT_OSL (all else equal) with both ``H`` positive:
    its measured and predicted split, the form's error on its 256-token row (nan: none), and its
    row at the shorter length."""
    same: dict[tuple[str, ...], dict[int, Row]] = defaultdict(dict)
    for r, _, _ in scored:
        if r["mode"] != "agg":
            continue
        key = (*(v for k, v in sorted(r.items()) if k not in _RESULTS | {"osl"}), _concurrency(r))
        same[key][int(r["osl"])] = r
    out = []
    for by_osl in same.values():
        if not all(n in by_osl for n in SPLIT_OSL):
            continue
        short, long_ = (by_osl[n] for n in SPLIT_OSL)
        dm, hm = _split(float(short["silicon_tpot_ms"]), float(long_["silicon_tpot_ms"]))
        dp, hp = _split(predicted[short["id"]], predicted[long_["id"]])
        if hm <= 0 or hp <= 0:
            continue  # interference below the two rows' noise: nothing to compare
        check = float("nan")
        if 256 in by_osl:
            check = (dm + hm / 255) / float(by_osl[256]["silicon_tpot_ms"]) - 1
        release = f"{short['backend']} {short['backend_version'] or '(none)'}"
        out.append((SplitPoint(release, dm, dp, hm, hp), check, short))
    return out


def split_by_configuration(points: list[tuple[SplitPoint, float, Row]]) -> list[dict[str, object]]:
    """The split grouped by engine release, model, quantisation, TP and prompt length (the
    concurrencies of a sweep together): medians of d and H predicted ÷ measured, and of H per
    other lane (ms a decoding request spends behind each other lane's prompt, as if it met every
    one), measured and predicted. Shows whether the cost of a prompt scales as compute would."""
    by: dict[tuple[str, ...], list[tuple[SplitPoint, int]]] = defaultdict(list)
    for pt, _, r in points:
        key = (pt.release, r["model_path"], r["gemm_quant_mode"] or "checkpoint", r["tp_size"], r["isl"])
        by[key].append((pt, int(_concurrency(r))))  # the benchmark's lanes, as the split's grouping reads them
    out = []
    for (release, model, quant, tp, isl), vals in sorted(by.items(), key=lambda kv: (kv[0][:4], int(kv[0][4]))):
        lanes = [(p, c) for p, c in vals if c > 1]
        out.append(
            {
                "release": release,
                "model": model,
                "quant": quant,
                "tp": int(tp),
                "isl": int(isl),
                "concurrencies": sorted(c for _, c in vals),
                "decode_step_pred_over_meas": statistics.median(p.pred_step_ms / p.meas_step_ms for p, _ in vals),
                "interference_pred_over_meas": statistics.median(p.pred_behind_ms / p.meas_behind_ms for p, _ in vals),
                "meas_ms_per_other_lane": statistics.median(p.meas_behind_ms / (c - 1) for p, c in lanes)
                if lanes
                else None,
                "pred_ms_per_other_lane": statistics.median(p.pred_behind_ms / (c - 1) for p, c in lanes)
                if lanes
                else None,
            }
        )
    return out


def tpot_split(points: list[tuple[SplitPoint, float, Row]]) -> dict[str, dict[str, float]]:
    """By engine release: configurations split, and the medians of predicted ÷ measured d and H."""
    by: dict[str, list[tuple[SplitPoint, float]]] = defaultdict(list)
    for pt, check, _ in points:
        by[pt.release].append((pt, check))
    out = {}
    for release, vals in sorted(by.items()):
        checks = [abs(c) for _, c in vals if not math.isnan(c)]
        out[release] = {
            "campaign_points": len(vals),
            "decode_step_pred_over_meas": statistics.median(p.pred_step_ms / p.meas_step_ms for p, _ in vals),
            "interference_pred_over_meas": statistics.median(p.pred_behind_ms / p.meas_behind_ms for p, _ in vals),
            "form_check_median_ape": statistics.median(checks) if checks else float("nan"),
        }
    return out


FIRST_TOKEN_ISL = (1024, 8192)


def first_token_lines(scored: list[tuple[Row, float, float]]) -> dict[str, dict[str, float]]:
    """Per engine, over the configurations measured at c ≤ 4 at both FIRST_TOKEN_ISL (OSL 1,024,
    all else equal): median measured and predicted slope (ms per 1,000 prompt tokens) and
    intercept (ms) of TTFT against the prompt length, and the median of their ratio/difference."""
    same: dict[tuple[str, ...], dict[int, tuple[float, float]]] = defaultdict(dict)
    for r, et, _ in scored:
        if r["mode"] != "agg" or int(r["batch_size"] or 0) > 4 or r["osl"] != "1024":
            continue
        isl = int(r["isl"])
        if isl not in FIRST_TOKEN_ISL:
            continue
        key = (r["backend"], *(v for k, v in sorted(r.items()) if k not in _RESULTS and k != "isl"))
        measured = float(r["silicon_ttft_ms"])
        same[key].setdefault(isl, (measured, measured * math.exp(et)))  # et = log(predicted ÷ measured)
    by: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    lo, hi = FIRST_TOKEN_ISL
    for key, pts in same.items():
        if lo not in pts or hi not in pts:
            continue
        (m_lo, p_lo), (m_hi, p_hi) = pts[lo], pts[hi]
        m_slope, p_slope = (m_hi - m_lo) / (hi - lo) * 1000, (p_hi - p_lo) / (hi - lo) * 1000
        by[key[0]].append((m_slope, p_slope, m_lo - m_slope * lo / 1000, p_lo - p_slope * lo / 1000))
    out = {}
    for backend, lines in sorted(by.items()):
        out[backend] = {
            "configurations": len(lines),
            "slope_measured_ms_per_1k": statistics.median(x[0] for x in lines),
            "slope_predicted_ms_per_1k": statistics.median(x[1] for x in lines),
            "slope_measured_over_predicted": statistics.median(x[0] / x[1] for x in lines if x[1] > 0),
            "intercept_measured_ms": statistics.median(x[2] for x in lines),
            "intercept_predicted_ms": statistics.median(x[3] for x in lines),
            "intercept_measured_minus_predicted_ms": statistics.median(x[2] - x[3] for x in lines),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--predictions", required=True, help="PRED.csv written by `tokenmill calibrate evaluate`")
    ap.add_argument("--measurements", default=str(DEFAULT_MEASUREMENTS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--split-figure",
        action="append",
        default=[],
        metavar="FILE.png|.svg",
        help="draw the TPOT split, predicted against measured (repeatable)",
    )
    ap.add_argument(
        "--by-configuration",
        action="store_true",
        help="also print the TPOT split by release, model, quantisation, TP and prompt length",
    )
    args = ap.parse_args()
    with open(args.measurements, newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    with open(args.predictions, newline="") as fh:
        predictions = list(csv.DictReader(fh))
    scored: list[tuple[Row, float, float]] = []
    for p in predictions:
        r = rows.get(p["id"])
        if r is None or not row_fully_specified(r) or not p["predicted_ttft_ms"] or not p["predicted_tpot_ms"]:
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
    predicted_tpot = {p["id"]: float(p["predicted_tpot_ms"]) for p in predictions if p["predicted_tpot_ms"]}
    points = split_points(scored, predicted_tpot)
    out["tpot_split"] = tpot_split(points)
    out["tpot_split_all"] = {
        "points": len(points),
        "decode_step_median_ape": statistics.median(abs(p.pred_step_ms / p.meas_step_ms - 1) for p, _, _ in points)
        if points
        else None,
        "interference_median_ape": statistics.median(abs(p.pred_behind_ms / p.meas_behind_ms - 1) for p, _, _ in points)
        if points
        else None,
    }
    for path in args.split_figure:
        tpot_split_figure([p for p, _, _ in points], Path(path))
    out["first_token_lines"] = first_token_lines(scored)
    configurations = split_by_configuration(points) if args.by_configuration else []
    if configurations:
        out["tpot_split_by_configuration"] = configurations
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
    split = out["tpot_split"]
    assert isinstance(split, dict)
    print(f"\nTPOT = d + H / (OSL - 1) from rows at {SPLIT_OSL[0]} and {SPLIT_OSL[1]} output tokens:")
    print(
        "| engine release | points | decode step d, predicted ÷ measured | interference H, predicted ÷ measured "
        "| form check at 256 (median error) |"
    )
    print("|---|---:|---:|---:|---:|")
    for release, v in split.items():
        print(
            f"| {release} | {v['campaign_points']} | {v['decode_step_pred_over_meas']:.2f} | "
            f"{v['interference_pred_over_meas']:.2f} | {100 * v['form_check_median_ape']:.1f} % |"
        )
    every = out["tpot_split_all"]
    assert isinstance(every, dict)
    if every["points"]:
        print(
            f"all {every['points']} points: decode step off by {100 * every['decode_step_median_ape']:.1f} %, "
            f"interference by {100 * every['interference_median_ape']:.1f} % (median absolute errors)"
        )
    lines = out["first_token_lines"]
    assert isinstance(lines, dict)
    lo, hi = FIRST_TOKEN_ISL
    print(f"\nTTFT = a + b × ISL at concurrency ≤ 4, from rows at {lo} and {hi} prompt tokens:")
    print(
        "| engine | configurations | slope b, measured / predicted (ms per 1k tokens) | measured ÷ predicted "
        "| intercept a, measured / predicted (ms) | measured − predicted |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for backend, v in lines.items():
        print(
            f"| {backend} | {v['configurations']} | {v['slope_measured_ms_per_1k']:.1f} / "
            f"{v['slope_predicted_ms_per_1k']:.1f} | {v['slope_measured_over_predicted']:.2f} | "
            f"{v['intercept_measured_ms']:.0f} / {v['intercept_predicted_ms']:.0f} | "
            f"{v['intercept_measured_minus_predicted_ms']:+.0f} |"
        )
    if configurations:
        print("\nBy configuration (H per other lane: H ÷ (C − 1), median over the sweep's concurrencies):")
        print(
            "| engine release | model | quant | TP | ISL | C | d pred ÷ meas | H pred ÷ meas "
            "| H per other lane, measured | predicted |"
        )
        print("|---|---|---|---:|---:|---|---:|---:|---:|---:|")
        for c in configurations:
            meas, pred = c["meas_ms_per_other_lane"], c["pred_ms_per_other_lane"]
            per_lane = (
                f"{meas:.1f} ms | {pred:.1f} ms" if isinstance(meas, float) and isinstance(pred, float) else "— | —"
            )
            conc = ",".join(str(x) for x in c["concurrencies"])  # type: ignore[attr-defined]
            print(
                f"| {c['release']} | {c['model']} | {c['quant']} | {c['tp']} | {c['isl']} | {conc} | "
                f"{c['decode_step_pred_over_meas']:.2f} | {c['interference_pred_over_meas']:.2f} | {per_lane} |"
            )


if __name__ == "__main__":
    main()
