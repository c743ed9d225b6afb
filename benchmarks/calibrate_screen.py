"""Screen a change to the constants on recorded steps: in-sample and leave-one-model-out, no replay.

A full refit (`calibrate fit`, 12 minutes) and leave-one-model-out (`calibrate_lomo.py`, 11
minutes) replay every row. To try a constant at a fixed value first, this script replays every
fully specified row once with the shipped constants, recording each step's demands (cached in
``--cache``, about 550 MB, 2–5 minutes; rebuilt when the shipped constants or the perf code change),
and then only re-weights the recorded steps:

1. refit from the shipped constants, with every ``--set KEY=VALUE`` global constant pinned; print
   the loss and the median absolute percentage errors of TTFT and TPOT;
2. with ``--lomo``: per model (grouped as in ``calibrate_lomo.py``; ``--only FAMILY``, repeatable,
   for some), refit from the priors (the ``--set`` constants pinned) on ``--max-rows`` of the other
   rows and predict the held-out rows from their recorded steps; print the table of
   ``calibrate_lomo.py``.

For aggregated rows, predictions from recorded steps equal a replay's (a closed loop's step
sequence does not depend on step times); so the medians match `calibrate evaluate` to within a
tenth of a point (28.0 % / 14.0 % against 28.0 % / 13.9 % with the shipped constants).

    .venv/bin/python benchmarks/calibrate_screen.py [--set collective_bandwidth_efficiency=0.8] [--lomo]

``--fit-without ENGINE@VERSION`` (repeatable) keeps that engine release's rows out of every refit,
in sample and held out, and still scores them: what a campaign the fit should not hear does to
the constants (docs/perf.md §4: TRT-LLM 1.2.0rc6.post3's DeepSeek-R1 rows, which decode as if
with a drafter the CSV does not record). The medians are printed for the rows left out and the
rest.

``--prior KEY=VALUE:WEIGHT`` moves the centre of the fit's pull on a constant and its weight per
row (``calibrate.BENCHMARK_PRIORS`` and ``PRIOR_WEIGHTS``), for the in-sample refit and the
leave-one-model-out refits alike.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import fields
from importlib import resources
from pathlib import Path

import numpy as np

from tokenmill.perf import calibrate
from tokenmill.perf.calibrate import FitData, collect, fit_constants, predict_recorded
from tokenmill.perf.calibrated import ParamTable, load_table, shipped_path
from tokenmill.perf.measurements import read_measurements
from tokenmill.perf.params import BOUNDS, GLOBAL_FIELDS
from tokenmill.perf.row_prediction import fitting_rows, predict_rows

sys.path.insert(0, str(Path(__file__).parent))
from calibrate_lomo import family

#: FitData's arrays (the rest are its name lists, kept in the cache's JSON meta)
ARRAYS = tuple(f.name for f in fields(FitData) if f.name not in ("gpus", "engines", "ids", "versions"))


def code_key() -> str:
    """The shipped constants and the perf sources: what the recorded steps depend on."""
    h = hashlib.sha256(shipped_path().read_bytes())
    root = resources.files("tokenmill")
    for sub in ("perf", "core", "plan", "sim"):
        for f in sorted(Path(str(root / sub)).glob("*.py")):
            h.update(f.read_bytes())
    return h.hexdigest()


def recorded(cache: Path, measurements: str, models_dir: str, jobs: int) -> tuple[FitData, dict[str, str]]:
    key = code_key()
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        meta = json.loads(str(z["meta"]))
        if meta["key"] == key:
            arrays = {k: z[k] for k in ARRAYS}
            data = FitData(meta["gpus"], meta["engines"], meta["ids"], versions=meta["versions"], **arrays)
            return data, meta["family"]
        print("recorded steps are stale: replaying again", file=sys.stderr)
    rows, _ = read_measurements(measurements)
    full = fitting_rows(rows)
    preds = predict_rows(full, models_dir, load_table(), record=True, jobs=jobs)
    data = collect(preds)
    fam = {r["id"]: family(r["model_path"], models_dir) for r in full}
    meta = {
        "key": key,
        "gpus": data.gpus,
        "engines": data.engines,
        "ids": data.ids,
        "versions": data.versions,
        "family": {i: fam[i] for i in data.ids},
    }
    np.savez(cache, meta=json.dumps(meta), **{k: getattr(data, k) for k in ARRAYS})
    return data, meta["family"]


def left_out(measurements: str, ids: list[str], releases: set[str]) -> np.ndarray:
    """Rows (in ``ids``' order) whose ``engine@version`` is one of ``releases``."""
    if not releases:
        return np.zeros(len(ids), dtype=bool)
    rows, _ = read_measurements(measurements)
    release = {r["id"]: f"{r['backend']}@{r['backend_version']}" for r in rows}
    unknown = releases - set(release.values())
    if unknown:
        sys.exit(f"--fit-without: no rows of {', '.join(sorted(unknown))} (ENGINE@VERSION, e.g. trtllm@1.2.0rc6.post3)")
    return np.array([release[i] in releases for i in ids])


def apes(data: FitData, table: ParamTable, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, p = predict_recorded(data, table, mask)
    return np.abs(t / data.meas_ttft[mask] - 1), np.abs(p / data.meas_tpot[mask] - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measurements", default="/work/shared/calibration/serving_measurements.csv")
    ap.add_argument("--models-dir", default="/work/shared/models")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/tokenmill-recorded-steps.npz"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="pin a global constant")
    ap.add_argument(
        "--prior", action="append", default=[], metavar="KEY=VALUE:WEIGHT", help="centre and weight of a pull"
    )
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--lomo", action="store_true")
    ap.add_argument("--max-rows", type=int, default=1200)
    ap.add_argument(
        "--only", action="append", default=[], metavar="FAMILY", help="with --lomo, hold out only these models"
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--no-dedupe",
        action="store_true",
        help="weigh every row 1 in the fit, also rows that repeat another's measurement (before 2026-12-04)",
    )
    ap.add_argument(
        "--fit-without",
        action="append",
        default=[],
        metavar="ENGINE@VERSION",
        help="keep this engine release's rows out of every refit (still scored); repeatable",
    )
    args = ap.parse_args()
    pinned: dict[str, float] = {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        if k not in GLOBAL_FIELDS:
            ap.error(f"--set {kv}: {k} is not a global constant ({', '.join(GLOBAL_FIELDS)})")
        pinned[k] = float(v)
    for kv in args.prior:
        k, _, vw = kv.partition("=")
        v, _, w = vw.partition(":")
        if k not in BOUNDS or not v or not w:
            ap.error(f"--prior {kv}: expected KEY=VALUE:WEIGHT with KEY a fitted constant")
        calibrate.BENCHMARK_PRIORS[k] = float(v)
        calibrate.PRIOR_WEIGHTS[k] = float(w)
    t0 = time.perf_counter()
    data, fam = recorded(args.cache, args.measurements, args.models_dir, args.jobs)
    print(f"{len(data.ids)} rows, {len(data.row):,} recorded steps ({time.perf_counter() - t0:.0f} s)")
    if args.no_dedupe:
        data.row_weight = np.ones(len(data.ids))
    print(f"the fit weighs them as {data.weights().sum():.0f} measurements")
    row_fam = np.array([fam[i] for i in data.ids])
    families = sorted(set(row_fam))
    unknown = set(args.only) - set(families)
    if unknown:
        sys.exit(f"--only: no model {', '.join(sorted(unknown))} (one of {', '.join(families)})")

    def start(table: ParamTable) -> ParamTable:
        table.global_.update(pinned)
        return table

    out = left_out(args.measurements, data.ids, set(args.fit_without))
    if out.any():
        print(f"{int(out.sum())} rows of {', '.join(sorted(args.fit_without))} kept out of every refit")
    table, report = fit_constants(data.without(~out), start(load_table()), sweeps=args.sweeps, fixed=tuple(pinned))
    everything = np.ones(len(data.ids), dtype=bool)
    et, ep = apes(data, table, everything)
    changes = args.set + args.prior
    print(
        f"in sample{' with ' + ', '.join(changes) if changes else ''}: loss {report.loss_before:.1f} → "
        f"{report.loss_after:.1f}; median TTFT {100 * np.median(et):.1f} %, TPOT {100 * np.median(ep):.1f} %"
    )
    print(json.dumps(table.to_json(), indent=1))
    if out.any():
        for name, mask in (("kept out of the fit", out), ("the rest", ~out)):
            print(
                f"{name}: {int(mask.sum())} rows, median TTFT {100 * np.median(et[mask]):.1f} %, "
                f"TPOT {100 * np.median(ep[mask]):.1f} %"
            )
    if not args.lomo:
        return
    print(
        "\n| held-out model | rows | TTFT in-sample | TTFT held out | ratio | TPOT in-sample | TPOT held out | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for f in args.only or families:
        held = row_fam == f
        order = sorted(np.flatnonzero(~held & ~out), key=lambda i: hashlib.sha256(data.ids[i].encode()).hexdigest())
        keep = np.zeros(len(held), dtype=bool)
        keep[order[: args.max_rows]] = True
        refit, _ = fit_constants(data.without(keep), start(ParamTable()), sweeps=args.sweeps, fixed=tuple(pinned))
        ht, hp = apes(data, refit, held)
        it, ip = float(np.median(et[held])), float(np.median(ep[held]))
        ot, op = float(np.median(ht)), float(np.median(hp))
        print(
            f"| {f} | {int(held.sum())} | {100 * it:.1f} % | {100 * ot:.1f} % | {ot / it:.2f} | "
            f"{100 * ip:.1f} % | {100 * op:.1f} % | {op / ip:.2f} |",
            flush=True,
        )
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
