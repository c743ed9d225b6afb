"""One calibration campaign as a user's benchmark sweep, through ``tokenmill predict --launch …
--measured …`` (docs/perf.md, "Your own deployment against the model").

Run: ``.venv/bin/python benchmarks/measured_campaign.py [--pattern ID_GLOB] [--launch CMD] [--gpu G]
[--refit N] [--figure docs/figures/measured-dsr1-h200-sglang] [--json]`` (a few seconds).

Each calibration row of the campaign (default: SGLang 0.5.9 serving DeepSeek-R1 FP8 with TP8 on
H200, 8,192/1,024 tokens at 4 to 64 lanes) is written as the result line SGLang's bench_serving
would have written for it (its lengths, lanes and mean TTFT and TPOT; the output throughput, which
the calibration file does not record, from the closed loop's Little's law: lanes × OSL ÷ (TTFT +
(OSL − 1) × TPOT)), and the files are handed to ``tokenmill predict`` with the launch command
that deployment would have been started with (the calibration reading's memory share, FP8 cache
and no prefix cache). The measured points go on the predicted curve's figure (PNG and SVG).

With ``--refit N`` the user goes one step further: ``tokenmill calibrate fit --launch … --measured
…`` on N of the points (the lowest, highest and evenly between in lanes), then ``predict --params``
with the refitted constants against every point, with the error band of a deployment's own refit.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "calibration" / "serving_measurements.csv"
PATTERN = "dsr1_h200_sglang_fp8_agg_8192x1024_c*_cfg81"
LAUNCH = (
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp-size 8 "
    "--mem-fraction-static 0.95 --kv-cache-dtype fp8_e4m3 --disable-radix-cache"
)


def result_line(row: dict[str, str]) -> dict[str, object]:
    """The row as SGLang's bench_serving result line (``--output-file``)."""
    source = dict(kv.split("=", 1) for kv in row["silicon_data_source"].split("; ") if "=" in kv)
    lanes = int(source.get("silicon_concurrency") or row["batch_size"])
    isl, osl = int(row["isl"]), int(row["osl"])
    ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    return {
        "backend": row["backend"],
        "dataset_name": "random",
        "request_rate": "inf",
        "max_concurrency": lanes,
        "random_input_len": isl,
        "random_output_len": osl,
        "random_range_ratio": 1.0,
        "completed": 10 * lanes,  # InferenceX sends 10 × C requests (reference §5.2)
        "mean_ttft_ms": ttft,
        "mean_tpot_ms": tpot,
        "output_throughput": lanes * osl / ((ttft + (osl - 1) * tpot) / 1e3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--pattern", default=PATTERN)
    ap.add_argument("--launch", default=LAUNCH)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--backend-version", default="0.5.9")
    ap.add_argument("--figure", type=Path, default=None, help="OUT: writes OUT.png and OUT.svg")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--refit", type=int, default=0, help="refit on N of the points first (calibrate fit --launch)")
    args = ap.parse_args()
    if args.refit == 1 or args.refit < 0:
        ap.error("--refit needs 2 points or more (or 0: none)")
    with args.csv.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if fnmatch.fnmatchcase(r["id"], args.pattern)]
    if not rows:
        print(f"no row of {args.csv} matches {args.pattern!r}", file=sys.stderr)
        return 2
    rows.sort(key=lambda r: int(result_line(r)["max_concurrency"]))  # type: ignore[call-overload]
    with tempfile.TemporaryDirectory() as tmp:
        measured: list[str] = []
        for row in rows:
            path = Path(tmp) / f"{row['id']}.json"
            path.write_text(json.dumps(result_line(row)))
            measured += ["--measured", str(path)]
        deployment = ["--gpu", args.gpu, "--launch", args.launch, "--backend-version", args.backend_version]
        cmd = [sys.executable, "-m", "tokenmill.cli", "predict", *deployment, *measured]
        if args.refit:
            n = min(args.refit, len(rows))
            picks = sorted({round(i * (len(rows) - 1) / (n - 1)) for i in range(n)})
            fit_on = [a for i in picks for a in measured[2 * i : 2 * i + 2]]
            mine = str(Path(tmp) / "mine.json")
            fit = [sys.executable, "-m", "tokenmill.cli", "calibrate", "fit", *deployment, *fit_on, "--out", mine]
            if args.json:
                fit.append("--json")
            fitted = subprocess.run(fit, capture_output=True, text=True, check=False)
            if not args.json:
                print(f"$ tokenmill calibrate fit … on {len(picks)} of the {len(rows)} points")
                print(fitted.stdout.replace(tmp + "/", ""), end="")
            if fitted.returncode:
                print(fitted.stderr.replace(tmp + "/", ""), end="", file=sys.stderr)
                return fitted.returncode
            cmd += ["--params", mine]
        if args.figure is not None:
            cmd += ["--figure", f"{args.figure}.png", "--figure", f"{args.figure}.svg"]
        if args.json:
            cmd.append("--json")
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(done.stdout.replace(tmp + "/", ""), end="")
    print(done.stderr.replace(tmp + "/", ""), end="", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
