"""Check: every row of a measurements file, run as the `tokenmill predict` command that
`tokenmill calibrate row` prints for it, answers what `calibrate evaluate` predicts for the row.

The two paths share the replay but not the reading: `predict` builds its plan from flags
(`cli.options`, `cli.deployments`), the calibration path from the row's cells
(`perf.measurements`). A row they disagree on (a TTFT or TPOT more than 1e-4 apart, relative:
`predict --json` rounds), or one refused by only one of them, is printed; the tests check a
handful of rows and random ones (`tests/test_cli_row_command.py`), this checks a whole file.

    .venv/bin/python benchmarks/row_commands.py [--measurements FILE] [--models-dir DIR] [--every N]

About 6 minutes for the 4,244 rows of the shared calibration file on two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

from tokenmill.cli import main
from tokenmill.cli.row_command import predict_argv
from tokenmill.cli.terminal_progress import progress
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.measurements import Skip, interpret, read_measurements
from tokenmill.perf.row_prediction import predict_spec

SHARED = Path(__file__).resolve().parents[2] / "shared"


def run(argv: list[str]) -> tuple[int, str, str]:
    """``tokenmill ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", type=Path, default=SHARED / "calibration" / "serving_measurements.csv")
    ap.add_argument("--models-dir", type=Path, default=SHARED / "models")
    ap.add_argument("--every", type=int, default=1, help="Check every N-th row (default: all).")
    args = ap.parse_args()
    rows, _ = read_measurements(args.measurements)
    rows = rows[:: max(1, args.every)]
    table = load_table()
    counts = {"same": 0, "refused by both": 0, "not read (skipped by both)": 0, "no flags": 0, "differ": 0}
    start = time.perf_counter()
    with progress(len(rows), False, "rows", auto_refresh=False) as bar:
        for row in rows:
            if bar:
                bar(1)
            spec = interpret(row, str(args.models_dir))
            if isinstance(spec, Skip):
                counts["not read (skipped by both)"] += 1
                continue
            expected = predict_spec(spec, table)
            try:
                argv = predict_argv(spec)
            except TokenmillError as exc:
                counts["no flags"] += 1
                print(f"no flags: {spec.id}: {exc}", file=sys.stderr)
                continue
            code, out, err = run([*argv, "--json"])
            if not expected.predicted:
                same = code == 2
                counts["refused by both" if same else "differ"] += 1
                if not same:
                    print(
                        f"differ: {spec.id}: skipped ({expected.skipped_reason}), predict exit {code}", file=sys.stderr
                    )
                continue
            if code != 0:
                counts["differ"] += 1
                print(f"differ: {spec.id}: predicted, but predict exit {code}: {err.strip()}", file=sys.stderr)
                continue
            got = json.loads(out)
            assert expected.ttft_ms is not None and expected.tpot_ms is not None
            ok = abs(got["ttft_ms"] / expected.ttft_ms - 1) <= 1e-4
            ok = ok and got["tpot_ms"] is not None and abs(got["tpot_ms"] / max(expected.tpot_ms, 1e-12) - 1) <= 1e-4
            counts["same" if ok else "differ"] += 1
            if not ok:
                print(
                    f"differ: {spec.id}: TTFT {expected.ttft_ms:.3f} / {got['ttft_ms']} ms, "
                    f"TPOT {expected.tpot_ms:.4f} / {got['tpot_ms']} ms",
                    file=sys.stderr,
                )
    took = time.perf_counter() - start
    print(
        f"{len(rows):,} rows of {args.measurements.name} in {took:.0f} s: "
        + ", ".join(f"{k} {v:,}" for k, v in counts.items())
    )
    return 1 if counts["differ"] else 0


if __name__ == "__main__":
    sys.exit(main_())
