"""Reading measurement rows, the shipped constants, and a deterministic fit."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from tokenmill.perf.calibrate import _tie_groups, collect, fit, predict_recorded, predict_rows, score
from tokenmill.perf.calibrated import ParamTable, load_table, params_for
from tokenmill.perf.measurements import RowSpec, Skip, find_config, interpret
from tokenmill.perf.params import ENGINE_FIELDS, GPU_FIELDS, PerfParams

MODELS = Path(str(resources.files("tokenmill.spec") / "presets"))


def row(**kw: str) -> dict[str, str]:
    base = {
        "id": "r1",
        "silicon_data_source": "x; silicon_concurrency=8",
        "backend": "vllm",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "system": "h100_sxm",
        "precision": "",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "gemm_quant_mode": "",
        "moe_quant_mode": "",
        "batch_size": "8",
        "tp_size": "1",
        "pp_size": "1",
        "attention_dp_size": "",
        "moe_tp_size": "1",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    }
    base.update(kw)
    return base


def test_model_names_resolve_by_the_documented_rule() -> None:
    path, note = find_config("meta-llama/Llama-3.1-8B-Instruct", MODELS)
    assert path is not None and path.name == "meta-llama--Meta-Llama-3.1-8B_config.json" and note
    exact, none = find_config("deepseek-ai/DeepSeek-R1", MODELS)
    assert exact is not None and none is None
    assert find_config("nvidia/DeepSeek-V3.1-NVFP4", MODELS) == (None, None)


def test_agg_row_reads_concurrency_and_layout() -> None:
    spec = interpret(row(), MODELS)
    assert isinstance(spec, RowSpec)
    assert spec.concurrency == 8 and spec.agg is not None and spec.agg.layout.tp == 1
    dp = interpret(
        row(
            model_path="MiniMaxAI/MiniMax-M2.5",
            tp_size="2",
            attention_dp_size="2",
            moe_tp_size="1",
            moe_ep_size="4",
            silicon_data_source="",
        ),
        MODELS,
    )
    assert isinstance(dp, RowSpec) and dp.agg is not None
    lay = dp.agg.layout
    assert (lay.tp, lay.dp_attention, lay.ep, lay.moe_a2a_backend) == (4, 2, 4, "deepep")
    assert dp.concurrency == 16  # batch_size × attention DP, said in the notes
    assert any("batch_size" in n for n in dp.notes)


def test_product_encoded_sizes_are_repaired_and_flagged() -> None:
    spec = interpret(
        row(
            model_path="deepseek-ai/DeepSeek-R1",
            system="b200_sxm",
            tp_size="64",
            attention_dp_size="1",
            moe_tp_size="8",
            moe_ep_size="8",
        ),
        MODELS,
    )
    assert isinstance(spec, RowSpec) and spec.agg is not None
    assert (spec.agg.layout.tp, spec.agg.layout.ep, spec.agg.layout.gpus_per_worker) == (8, 8, 8)
    assert any(n.startswith("repaired") for n in spec.notes)
    wide = interpret(
        row(model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", tp_size="16", moe_tp_size="16", moe_ep_size="1"),
        MODELS,
    )
    assert isinstance(wide, Skip) and "wider than" in wide.reason


def test_broken_rows_are_skipped_with_a_reason() -> None:
    bad = interpret(row(tp_size="2", moe_tp_size="2", moe_ep_size="2"), MODELS)
    assert isinstance(bad, Skip) and "inconsistent" in bad.reason
    assert isinstance(interpret(row(model_path="acme/Unknown-7B"), MODELS), Skip)
    assert "unknown system" in interpret(row(system="tpu_v9"), MODELS).reason  # type: ignore[union-attr]


def test_disaggregated_rows_without_batch_sizes_are_predicted_under_an_assumption() -> None:
    r = row(mode="disagg", tp_size="", moe_tp_size="", moe_ep_size="", batch_size="", model_path="Qwen/Qwen3-32B")
    r.update({"prefill_tp_size": "2", "decode_tp_size": "2", "prefill_pp_size": "1", "decode_pp_size": "1"})
    spec = interpret(r, MODELS)
    assert isinstance(spec, RowSpec) and not spec.fully_specified
    assert spec.prefill is not None and spec.decode is not None and spec.gpus == 4
    assert any("assumed" in n for n in spec.notes)


def test_shipped_constants_load_and_fall_back_with_notes() -> None:
    table = load_table()
    assert {"h100", "h200", "b200", "b300", "gb200"} <= set(table.gpus)
    assert {"sglang", "vllm", "trtllm"} <= set(table.backends)
    for g in table.gpus.values():
        assert set(GPU_FIELDS) <= set(g)
    for b in table.backends.values():
        assert set(ENGINE_FIELDS) <= set(b)
    assert "command" in table.meta
    p, notes = params_for("h100_sxm", "vllm")
    assert isinstance(p, PerfParams) and not notes
    _, gb300 = params_for("gb300", "sglang")
    assert any("b300" in n for n in gb300)
    prior, amd = params_for("mi355x", None)
    assert any("priors" in n for n in amd) and any("no engine" in n for n in amd)
    assert prior.matmul_efficiency == PerfParams().matmul_efficiency


def test_small_fit_is_deterministic_and_lowers_the_loss(tmp_path: Path) -> None:
    rows = [
        row(
            id="a",
            isl="512",
            osl="64",
            silicon_data_source="s; silicon_concurrency=1",
            silicon_ttft_ms="45",
            silicon_tpot_ms="6.1",
        ),
        row(
            id="b",
            isl="512",
            osl="64",
            silicon_data_source="s; silicon_concurrency=16",
            silicon_ttft_ms="120",
            silicon_tpot_ms="8.0",
        ),
        row(
            id="c",
            isl="2048",
            osl="64",
            tp_size="2",
            moe_tp_size="1",
            silicon_data_source="s; silicon_concurrency=4",
            silicon_ttft_ms="90",
            silicon_tpot_ms="5.0",
        ),
        row(
            id="d",
            backend="sglang",
            isl="1024",
            osl="64",
            silicon_data_source="s; silicon_concurrency=8",
            silicon_ttft_ms="150",
            silicon_tpot_ms="7.5",
        ),
    ]
    runs = [fit(rows, MODELS, ParamTable(), rounds=1, sweeps=1) for _ in range(2)]
    (t1, r1, _), (t2, _, _) = runs
    assert t1.to_json() == t2.to_json()
    assert r1.loss_after < r1.loss_before and r1.rows == 4
    preds = predict_rows(rows, MODELS, t1)
    assert score(preds)["overall"]["coverage"] == 1.0


def test_kernel_efficiencies_are_shared_by_generation_and_fp4_by_architecture() -> None:
    # H100/H200 are Hopper; B200, GB200 and B300 share the Blackwell SM (B300 is Blackwell Ultra,
    # whose FP4 peak is its own); an unknown GPU stands alone.
    gpus = ["b200", "b300", "gb200", "h100", "h200", "mystery"]
    assert _tie_groups(gpus, "matmul_efficiency") == [[0, 1, 2], [3, 4], [5]]
    assert _tie_groups(gpus, "attention_efficiency") == [[0, 1, 2], [3, 4], [5]]
    assert _tie_groups(gpus, "fp4_matmul_ratio") == [[0, 2], [1], [3, 4], [5]]
    assert _tie_groups(gpus, "collective_latency_s") == [[0], [1], [2], [3], [4], [5]]


def test_recorded_steps_reweighted_equal_a_replay_with_other_constants() -> None:
    """What the fit and benchmarks/calibrate_screen.py rely on: record a closed loop's steps under
    one set of constants, re-weight them under another, and get the replay under the other."""
    rows = [
        row(id="a", silicon_data_source="s; silicon_concurrency=1", isl="512", osl="64"),
        row(id="b", silicon_data_source="s; silicon_concurrency=16", isl="2048", osl="128", tp_size="2"),
        row(id="c", backend="sglang", silicon_data_source="s; silicon_concurrency=8", isl="1024", osl="256"),
    ]
    data = collect(predict_rows(rows, MODELS, ParamTable(), record=True))
    other = ParamTable(
        global_={"step_overhead_s": 4e-3, "decode_layer_overhead_s": 30e-6},
        gpus={"h100": {"weight_bandwidth_efficiency": 0.5, "matmul_efficiency": 0.3}},
        backends={"vllm": {"burst_share": 0.9, "request_latency_s": 0.05}, "sglang": {"overhead_scale": 3.0}},
    )
    ttft, tpot = predict_recorded(data, other, np.ones(len(data.ids), dtype=bool))
    replayed = {p.id: p for p in predict_rows(rows, MODELS, other)}
    for i, rid in enumerate(data.ids):
        assert ttft[i] * 1e3 == pytest.approx(replayed[rid].ttft_ms, rel=1e-9)
        assert tpot[i] * 1e3 == pytest.approx(replayed[rid].tpot_ms, rel=1e-9)
    # and the other constants do move the predictions (the check above is not vacuous)
    base_ttft, _ = predict_recorded(data, ParamTable(), np.ones(len(data.ids), dtype=bool))
    assert all(abs(a / b - 1) > 0.05 for a, b in zip(ttft, base_ttft, strict=True))
