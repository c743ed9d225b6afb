"""Llama 4 Maverick on 8 × H200: what chunked local attention saves as prompts grow (docs/perf.md §1).

Run: ``.venv/bin/python benchmarks/chunked_attention.py [--out docs/figures/llama4-chunked]``
(about 10 s; writes OUT.png and OUT.svg and prints the table behind them).

The same checkpoint (``tests/spec/fixtures/llama_4_maverick_config.json``, BF16, TP8 under SGLang's
fitted H200 constants) predicted twice at each prompt length, with its ``attention_chunk_size`` of
8,192 tokens (three layers in four attend within their chunk) and with it set to null (every
layer attends to the whole context), through ``perf.predict.predict``: the time to first token of
one request and the time per output token at one and at eight lanes, 1,024 output tokens. No row
of the calibration file ran a Llama 4: these are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenmill.hardware import load_gpu
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.predict import predict
from tokenmill.plan import Layout, plan_memory
from tokenmill.report.figure_base import plain_log_labels, pyplot, save
from tokenmill.spec import model_from_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "spec" / "fixtures" / "llama_4_maverick_config.json"
PROMPTS = (2048, 8192, 16384, 32768, 65536, 131072)
OSL = 1024


def _model(chunked: bool) -> object:
    config = json.loads(CONFIG.read_text())
    if not chunked:
        config["text_config"]["attention_chunk_size"] = None
    return model_from_config(config, "llama-4-maverick" + ("" if chunked else " (full attention)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "llama4-chunked"))
    args = ap.parse_args()
    gpu = load_gpu("h200")
    params, _ = load_table(None).resolve("h200", "sglang", None)
    rows: dict[str, list[tuple[int, float, float, float]]] = {}
    print(f"{'attention':<10} {'prompt':>8} {'TTFT 1 lane ms':>15} {'TPOT 1 lane ms':>15} {'TPOT 8 lanes ms':>16}")
    for chunked in (True, False):
        plan = plan_memory(_model(chunked), gpu, 8, Layout(tp=8))  # type: ignore[arg-type]
        name = "chunked" if chunked else "full"
        for isl in PROMPTS:
            one = predict(plan, "sglang", isl, OSL, 1, params)
            eight = predict(plan, "sglang", isl, OSL, 8, params)
            rows.setdefault(name, []).append((isl, one.ttft_ms, one.tpot_ms, eight.tpot_ms))
            print(f"{name:<10} {isl:>8,} {one.ttft_ms:>15,.1f} {one.tpot_ms:>15.2f} {eight.tpot_ms:>16.2f}")

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"chunked": ("tab:blue", "chunks of 8,192 (as shipped)"), "full": ("tab:gray", "full attention")}
    for name, points in rows.items():
        color, label = styles[name]
        xs = [p[0] for p in points]
        left.plot(xs, [p[1] / 1e3 for p in points], "o-", color=color, label=label)
        right.plot(xs, [p[2] for p in points], "o-", color=color, label=f"{label}, 1 lane")
        right.plot(xs, [p[3] for p in points], "s--", color=color, label=f"{label}, 8 lanes")
    left.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="time to first token, s (1 lane)")
    right.set(xscale="log", xlabel="prompt tokens", ylabel="time per output token, ms", ylim=(0, None))
    for ax in (left, right):
        plain_log_labels(ax)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Llama 4 Maverick (BF16) on 8 × H200, TP8, SGLang's fitted constants: predicted, {OSL:,} output tokens",
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(args.out)
    save(fig, [out.with_suffix(".png"), out.with_suffix(".svg")])
    print(f"wrote {out.with_suffix('.png')} and {out.with_suffix('.svg')}")


if __name__ == "__main__":
    main()
