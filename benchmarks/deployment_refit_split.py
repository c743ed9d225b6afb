"""Whether ``calibrate fit --start``'s settings (its anchor, its sweeps), chosen on
benchmarks/deployment_refit.py's table, hold on deployments they were not chosen on: split the
deployments in two at random, choose the setting on one half (the smallest sum of the median TTFT
and TPOT errors), score it on the other.

Run: ``for A in 0 0.01 0.03 0.1 0.3; do .venv/bin/python benchmarks/deployment_refit.py --anchor $A
--json > refit-$A.json; done; .venv/bin/python benchmarks/deployment_refit_split.py 0=refit-0.json
0.01=refit-0.01.json 0.03=refit-0.03.json 0.1=refit-0.1.json 0.3=refit-0.3.json [--splits 20]
[--seed 0]`` (the runs about three minutes each, this a second). A label is any name without
``=``: ``0.01/s20=FILE`` for a run with ``--anchor 0.01 --sweeps 20``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np


def median_error(runs: dict[str, list[dict[str, Any]]], anchor: str, idx: np.ndarray, key: str) -> float:
    values = [r[key] for i in idx for r in runs[anchor][i].get("rows", []) if r[key] is not None]
    return float(np.median(values)) * 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=FILE: a deployment_refit.py --json output and its settings")
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {}
    for item in args.runs:
        anchor, sep, path = item.partition("=")
        if not sep:
            ap.error(f"give LABEL=FILE (got {item!r})")
        runs[anchor] = json.loads(Path(path).read_text())["deployments"]
    names = {a: [json.dumps(d["deployment"], sort_keys=True) for d in v] for a, v in runs.items()}
    if len({tuple(v) for v in names.values()}) != 1:
        ap.error("the runs scored different deployments: run them on the same file with the same --points")
    n = len(next(iter(names.values())))
    rng = np.random.default_rng(args.seed)
    chosen: list[str] = []
    held: list[list[float]] = []
    for _ in range(args.splits):
        perm = rng.permutation(n)
        pick, score = perm[: n // 2], perm[n // 2 :]
        best = min(
            runs, key=lambda a: median_error(runs, a, pick, "ttft_after") + median_error(runs, a, pick, "tpot_after")
        )
        chosen.append(best)
        held.append(
            [median_error(runs, best, score, k) for k in ("ttft_after", "tpot_after")]
            + [median_error(runs, a, score, k) for a in runs for k in ("ttft_after", "tpot_after")]
            + [median_error(runs, best, score, k) for k in ("ttft_before", "tpot_before")]
        )
    mean = np.mean(held, axis=0)
    print(f"{args.splits} random halves of {n} deployments; setting chosen on one half: {dict(Counter(chosen))}")
    print(f"on the other half (means of the medians): chosen TTFT {mean[0]:.1f} %, TPOT {mean[1]:.1f} %")
    for j, a in enumerate(runs):
        print(f"  {a}: TTFT {mean[2 + 2 * j]:.1f} %, TPOT {mean[3 + 2 * j]:.1f} %")
    print(f"  shipped constants: TTFT {mean[-2]:.1f} %, TPOT {mean[-1]:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
