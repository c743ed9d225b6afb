"""Kimi-K3 on 8×B300 (seed 000 §2.3) against tokenmill's calibrated performance model.

Run: ``.venv/bin/python benchmarks/calibrate_seed_checks.py [--params FILE] [--set KEY=VALUE]… [--json]``

Every number comes from ``tokenmill.perf.seed_checks`` (the simulator, ``tokenmill.sim.simulate``,
or the closed-loop replay of ``tokenmill predict``), with the calibrated constants of B300 under
SGLang (the seed's engine); ``tests/perf/test_seed_checks.py`` pins the same figures. K3 is not in
the calibration data: these are predictions for a model the fit never saw.

``--set KEY=VALUE`` (repeatable, as in ``tokenmill predict``) runs the same checks on the fitted
constants with some changed: a what-if for a build the fit did not see (docs/perf.md §6: the seed's
fused all-reduces, ``--set collective_latency_s=5e-6 --set overhead_scale=1``), not a prediction.
"""

from __future__ import annotations

import argparse
import json
import time

from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.params import override
from tokenmill.perf.seed_checks import SeedCheck, k3_b300_seed_checks


def _within(check: SeedCheck) -> str:
    """Within the issue's 15 % or not, and the error against the published value (or the nearest
    end of a published range)."""
    return f"{'yes' if check.within() else 'no'} ({100 * check.error:+.0f} %)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--gpu-constants", default="b300", help="whose fitted GPU constants to use (diagnostic)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a what-if on a constant")
    args = ap.parse_args()
    t0 = time.perf_counter()
    params, notes = load_table(args.params).resolve(args.gpu_constants, "sglang")
    if args.set:
        try:
            params, note = override(params, args.set)
        except TokenmillError as exc:
            ap.error(str(exc))
        notes = [*notes, note]
    report = k3_b300_seed_checks(params)
    rows = [
        {
            "check": c.name,
            "published": c.published,
            "predicted": round(c.predicted, 3),
            "unit": c.unit,
            "within_15pct": _within(c),
        }
        for c in report.checks
    ]
    breakdown = report.fresh_64
    out = {"rows": rows, "fresh_64": breakdown, "notes": notes, "seconds": round(time.perf_counter() - t0, 1)}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("| check | published | tokenmill | within 15 % |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['check']} | {r['published']} | {r['predicted']:,} {r['unit']} | {r['within_15pct']} |")
    b = breakdown
    print(
        f"64 fresh requests: {b['requests']} in {b['seconds']} s; prefill steps {b['prefill_steps_s']} s "
        f"({b['prefill_s_per_prompt']} s a prompt), {b['decode_steps']:,} decode steps {b['decode_steps_s']} s "
        f"({b['decode_step_ms']} ms at {b['decode_batch']} requests); at ~2 requests/s with this prefill "
        f"the decode steps would have {b['decode_step_ms_the_seed_leaves']} ms each"
    )
    for n in notes:
        print(f"note: {n}")
    print(f"({out['seconds']} s)")


if __name__ == "__main__":
    main()
