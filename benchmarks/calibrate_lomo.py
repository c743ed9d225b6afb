"""Leave-one-model-out: refit without a model's rows, predict them, compare with the in-sample error.

Run: ``.venv/bin/python benchmarks/calibrate_lomo.py [--max-rows N] [--sweeps S] [--jobs J]
[--params FILE --versions]`` (the second form: in-sample constants from FILE, and the refits give
engine versions constants of their own, as ``calibrate fit --versions`` does).

``--hold-out gpu`` leaves one GPU kind out instead, and ``--hold-out architecture`` one GPU
architecture (Hopper: H100 and H200; Blackwell: B200 and GB200; Blackwell Ultra: B300): the
held-out rows are then predicted as ``tokenmill predict`` predicts a GPU the constants do not
name, with the fitted values of a GPU of the same architecture where there is one, else the
median of the other fitted GPUs' values (``calibrated.ParamTable.resolve``; the table's
``constants`` column says which). That is the error to expect of a new GPU. A GPU with no other of
its architecture (B300) is predicted from those medians when held out: its row is in the GPU
table, but its predictions go to the architecture's bands, not the GPU bands.

1. Replay every fully specified row once with the shipped constants, recording the steps (the
   in-sample predictions come from this same replay).
2. For each model (grouped by architecture: DeepSeek-R1 and -V3 share one config, and NVIDIA's
   re-quantized checkpoints go with their base model), fit the constants from the priors on the
   recorded steps of all *other* rows (a stratified subsample of ``--max-rows``), then replay the
   held-out model's rows with those constants.
3. Print, per model, the median absolute percentage error of TTFT and TPOT in sample and held out,
   and their ratio (the issue's bound: held-out ≤ 1.5 × in-sample).

With ``--accuracy FILE`` (an accuracy.json measured with the same in-sample constants, as
``calibrate evaluate --accuracy-out`` writes it), the held-out predictions of all models also
become that file's held-out error bands (``held_out_groups``, ``perf.accuracy``): what
``tokenmill predict`` shows for a model the calibration file does not hold; with ``--hold-out
gpu`` or ``architecture``, its ``held_out_gpu_groups`` or ``held_out_architecture_groups``: what
it shows for a GPU the file does not hold, of a calibrated architecture or of a new one.

    .venv/bin/python benchmarks/calibrate_lomo.py --max-rows 1200 --sweeps 3 \
        --accuracy src/tokenmill/perf/calibrated/accuracy.json
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf.accuracy import fingerprint, load_accuracy, measure, scored_rows
from tokenmill.perf.calibrate import collect, fit_constants
from tokenmill.perf.calibrated import ParamTable, load_table, same_architecture, shipped_path
from tokenmill.perf.measurements import find_config, read_measurements
from tokenmill.perf.row_prediction import fitting_rows, predict_rows

#: the ``constants`` column of a group predicted from the medians of the other fitted GPUs' values
ACROSS_GPUS = "medians of the other GPUs'"


def family(model_path: str, models_dir: str) -> str:
    cfg, _ = find_config(model_path, models_dir)
    name = cfg.name.removesuffix("_config.json") if cfg else model_path
    return "deepseek-ai--DeepSeek-V3/R1" if "DeepSeek" in name else name


def gpu_group(system: str, by: str) -> str:
    """The held-out group of a row's system: its GPU kind, or its GPU's architecture."""
    gpu = load_gpu(system)
    return gpu.architecture if by == "architecture" else gpu.name


def med(errs: list[float]) -> float:
    return float(np.median(errs)) if errs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measurements", default="/work/shared/calibration/serving_measurements.csv")
    ap.add_argument("--models-dir", default="/work/shared/models")
    ap.add_argument("--max-rows", type=int, default=1500)
    ap.add_argument("--sweeps", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--params", default=None, help="In-sample constants (default: the shipped ones).")
    ap.add_argument("--versions", action="store_true", help="Fit engine constants per version too (fit --versions).")
    ap.add_argument("--accuracy", default=None, help="accuracy.json to add the held-out error bands to")
    ap.add_argument(
        "--hold-out", choices=("model", "gpu", "architecture"), default="model", help="what each refit leaves out"
    )
    ap.add_argument("--only", action="append", default=[], help="hold out only this group (repeatable)")
    ap.add_argument("--tables-out", default=None, help="directory to write each refit's constants to (GROUP.json)")
    ap.add_argument("--predictions-out", default=None, help="CSV of every held-out row's predictions")
    args = ap.parse_args()
    if args.only and args.accuracy:
        raise SystemExit("--only: the error bands need every group held out; drop --accuracy")
    t0 = time.perf_counter()
    accuracy = None
    if args.accuracy:
        accuracy = load_accuracy(args.accuracy)
        if accuracy is None or accuracy.params_sha256 != fingerprint(args.params or shipped_path()):
            raise TokenmillError(f"--accuracy {args.accuracy}: not measured with the in-sample constants")
    rows, _ = read_measurements(args.measurements)
    full = fitting_rows(rows)
    shipped = load_table(args.params)
    preds = predict_rows(full, args.models_dir, shipped, record=True, jobs=args.jobs)
    data = collect(preds, versions=args.versions)
    if args.hold_out == "model":
        fam = {r["id"]: family(r["model_path"], args.models_dir) for r in full}
    else:
        fam = {r["id"]: gpu_group(r["system"], args.hold_out) for r in full}
    row_fam = np.array([fam[i] for i in data.ids])
    results = []
    held_out = []  # every model's rows predicted without it
    every_out = []  # the same, and B300's rows in --hold-out gpu
    groups = sorted(set(row_fam))
    unknown = sorted(set(args.only) - set(groups))
    if unknown:
        raise SystemExit(f"--only: unknown group {', '.join(unknown)} (known: {', '.join(groups)})")
    for f in groups:
        if args.only and f not in args.only:
            continue
        held = row_fam == f
        rest = ~held
        # stratified deterministic subsample of the rest
        idx = np.flatnonzero(rest)
        order = sorted(idx, key=lambda i: hashlib.sha256(data.ids[i].encode()).hexdigest())
        keep = np.zeros(len(held), dtype=bool)
        keep[order[: args.max_rows]] = True
        table, _ = fit_constants(data.without(keep), ParamTable(), sweeps=args.sweeps)
        if args.tables_out:
            Path(args.tables_out).mkdir(parents=True, exist_ok=True)
            table.write(Path(args.tables_out) / f"{f.replace('/', '_')}.json")
        ids = set(np.asarray(data.ids)[held])
        held_rows = [r for r in full if r["id"] in ids]
        out = predict_rows(held_rows, args.models_dir, table, jobs=args.jobs)
        source = "fitted"
        if args.hold_out != "model":
            sources = {same_architecture(load_gpu(r["system"]).name, table.gpus) for r in held_rows}
            source = ", ".join(sorted(f"{g}'s kernels, medians" if g else ACROSS_GPUS for g in sources))
        # a GPU held out with no other GPU of its architecture is predicted from the other GPUs'
        # medians: that is the architecture's case, not the one the GPU bands describe
        if args.hold_out != "gpu" or ACROSS_GPUS not in source:
            held_out += out
        every_out += out
        ins = [p for p in preds if p.id in ids and p.predicted]
        res = {
            "held_out": f,
            "constants": source,
            "rows": len(held_rows),
            "ttft_in": med([abs(p.ttft_ms / p.measured_ttft_ms - 1) for p in ins]),  # type: ignore[operator]
            "tpot_in": med([abs(p.tpot_ms / p.measured_tpot_ms - 1) for p in ins]),  # type: ignore[operator]
            "ttft_out": med([abs(p.ttft_ms / p.measured_ttft_ms - 1) for p in out if p.predicted]),  # type: ignore[operator]
            "tpot_out": med([abs(p.tpot_ms / p.measured_tpot_ms - 1) for p in out if p.predicted]),  # type: ignore[operator]
        }
        res["ttft_ratio"] = res["ttft_out"] / res["ttft_in"]
        res["tpot_ratio"] = res["tpot_out"] / res["tpot_in"]
        results.append(res)
        print(json.dumps(res), flush=True)
    if args.predictions_out:
        with open(args.predictions_out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "held_out_ttft_ms", "held_out_tpot_ms"])
            for p in every_out:
                w.writerow([p.id, p.ttft_ms if p.predicted else "", p.tpot_ms if p.predicted else ""])
    if accuracy is not None:
        bands = measure(scored_rows(held_out))
        command = f"benchmarks/calibrate_lomo.py --max-rows {args.max_rows} --sweeps {args.sweeps}"
        if args.hold_out == "model":
            accuracy.held_out = bands
            prefix = "held_out"
        else:
            command += f" --hold-out {args.hold_out}"
            if args.hold_out == "gpu":
                accuracy.held_out_gpu = bands
            else:
                accuracy.held_out_architecture = bands
            prefix = f"held_out_{args.hold_out}"
        accuracy.meta[f"{prefix}_command"] = command + " --accuracy FILE"
        accuracy.meta[f"{prefix}_rows_scored"] = bands["all"].rows
        accuracy.write(args.accuracy)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"\n| held-out {args.hold_out} | constants | rows | TTFT in-sample | TTFT held out | ratio "
        "| TPOT in-sample | TPOT held out | ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['held_out']} | {r['constants']} | {r['rows']} | "
            f"{100 * r['ttft_in']:.1f} % | {100 * r['ttft_out']:.1f} % | "
            f"{r['ttft_ratio']:.2f} | {100 * r['tpot_in']:.1f} % | {100 * r['tpot_out']:.1f} % | "
            f"{r['tpot_ratio']:.2f} |"
        )
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
