"""Time ``tokenmill calibrate evaluate`` on the whole calibration file and print its tables.

Run: ``.venv/bin/python benchmarks/calibrate_evaluate.py [--measurements CSV] [--models-dir DIR]
[--jobs N] [--params FILE] [--out PRED.csv] [--figure F.png --figure F.svg] [--accuracy-out FILE]``.
Prints the wall time (the issue's budget: < 10 minutes on a 2-core machine) and the error tables
as Markdown, as docs/perf.md shows them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def table(groups: dict[str, dict[str, Any]], label: str) -> str:
    lines = [
        f"| {label} | rows | predicted | coverage | TTFT median | TTFT p90 | TPOT median | TPOT p90 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in groups.items():
        lines.append(
            f"| {name} | {s['rows']} | {s['predicted']} | {pct(s['coverage'])} | {pct(s['ttft_median_ape'])} | "
            f"{pct(s['ttft_p90_ape'])} | {pct(s['tpot_median_ape'])} | {pct(s['tpot_p90_ape'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measurements", default="/work/shared/calibration/serving_measurements.csv")
    ap.add_argument("--models-dir", default="/work/shared/models")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--params", default=None)
    ap.add_argument("--out", default=None, help="predictions CSV (default: a temporary file)")
    ap.add_argument("--figure", action="append", default=[], help="also draw the scatter (.png/.svg, repeatable)")
    ap.add_argument("--accuracy-out", default=None, help="also write the error bands `predict` shows")
    args = ap.parse_args()
    out = args.out or str(Path(tempfile.mkdtemp()) / "pred.csv")
    cmd = [
        sys.executable,
        "-m",
        "tokenmill.cli",
        "calibrate",
        "evaluate",
        "--measurements",
        args.measurements,
        "--models-dir",
        args.models_dir,
        "--out",
        out,
        "--jobs",
        str(args.jobs),
        "--json",
    ]
    if args.params:
        cmd += ["--params", args.params]
    for fig in args.figure:
        cmd += ["--figure", fig]
    if args.accuracy_out:
        cmd += ["--accuracy-out", args.accuracy_out]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - t
    if proc.returncode:
        print(proc.stderr, file=sys.stderr)
        sys.exit(proc.returncode)
    result = json.loads(proc.stdout)
    print(
        f"calibrate evaluate: {elapsed:.0f} s wall on {os.cpu_count()} cores ({args.jobs} jobs); predictions in {out}\n"
    )
    print(table({"fully specified": result["overall"], "disagg, workers assumed": result["assumed_disagg"]}, "rows"))
    print()
    print(table(result["by_system_backend"], "system / engine"))
    print()
    print(table(result["by_model"], "model"))
    print()
    print(table(result["by_mode"], "mode"))
    print("\nskipped:", json.dumps(result["skipped_reasons"], indent=1))


if __name__ == "__main__":
    main()
