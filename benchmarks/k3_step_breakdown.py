"""Kimi-K3 on 8 × B300: one request's decode step and its 8,400-token prefill step, by component,
on SGLang's fitted constants and on a what-if build (docs/perf.md §6).

Run: ``.venv/bin/python benchmarks/k3_step_breakdown.py [--set KEY=VALUE]… [--out docs/figures/k3-b300-steps]``
(about 1 s; writes OUT.png and OUT.svg and prints the table behind them).

The seed's three recipes (``perf.seed_checks.RECIPES``: TP8, TP8 × DCP8, DCP8 with the DSPARK
drafter) each predicted for one request of 8,400 prompt and 512 output tokens
(``perf.predict.predict``): its decode step (per verify pass for the drafter) and one prompt's
prefill, one step here (``Prediction.prefill``), on B300's fitted SGLang constants and on the same with
``--set`` applied (default: all-reduces of 5 µs and launch gaps at the bare fitted per-layer costs,
``collective_latency_s=5e-6`` and ``overhead_scale=1``, the what-if of docs/perf.md §6). The
seed's published time per output token is marked on the decode bars (× the drafter's accept
length 2.7 on its verify pass) and its first token, everything included, on the prefill bars.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenmill.hardware import load_gpu
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.params import override
from tokenmill.perf.predict import predict
from tokenmill.perf.seed_checks import RECIPES
from tokenmill.plan import plan_memory
from tokenmill.report.step_figures import StepBar, step_breakdown_figure
from tokenmill.spec import load_model

ROOT = Path(__file__).resolve().parents[1]
WHAT_IF = ["collective_latency_s=5e-6", "overhead_scale=1"]
#: the seed's single-request figures (§2.3): time per output token, ms, and the accept length
PUBLISHED_TPOT_MS = {"low": 7.7, "bal": 8.5, "draft": 3.8}
ACCEPT = {"low": 1.0, "bal": 1.0, "draft": 2.7}
PUBLISHED_TTFT_MS = 440.0
LABELS = {"low": "TP8", "bal": "TP8 DCP8", "draft": "DCP8 + DSPARK (verify pass)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", help="the what-if (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "k3-b300-steps")
    args = ap.parse_args()
    fitted, _ = load_table().resolve("b300", "sglang")
    what_if, note = override(fitted, args.set or WHAT_IF)
    k3, b300 = load_model("kimi-k3"), load_gpu("b300")
    decode: list[StepBar] = []
    prefill: list[StepBar] = []
    print("| recipe | constants | decode step (ms) | prefill step, 8,400 tokens (ms) |")
    print("|---|---|---:|---:|")
    for key, layout in RECIPES.items():
        plan = plan_memory(k3, b300, 8, layout)
        for name, params in (("fitted", fitted), ("what-if", what_if)):
            p = predict(plan, "sglang", 8400, 512, 1, params)
            assert p.prefill is not None
            step_ms = {k: v * 1e3 for k, v in p.decode_step["breakdown"].items()}
            pre_ms = {k: v * 1e3 for k, v in p.prefill["breakdown"].items()}
            label = f"{LABELS[key]}, {name}"
            decode.append(StepBar(label, step_ms, PUBLISHED_TPOT_MS[key] * ACCEPT[key]))
            prefill.append(StepBar(label, pre_ms, PUBLISHED_TTFT_MS))
            print(f"| {LABELS[key]} | {name} | {sum(step_ms.values()):.2f} | {sum(pre_ms.values()):.1f} |")
    out = [args.out.with_suffix(".png"), args.out.with_suffix(".svg")]
    step_breakdown_figure(
        [
            ("one decode step, 1 request at 8,651 tokens\n(published: TPOT × accept length)", decode),
            ("one prefill step, 8,400 tokens\n(published: the first token, everything included)", prefill),
        ],
        out,
        title=f"Kimi-K3 on 8×B300 under SGLang's fitted constants, and a what-if: {note.split(': ', 1)[1]}",
    )
    print(f"wrote {out[0]} and {out[1]}")


if __name__ == "__main__":
    main()
