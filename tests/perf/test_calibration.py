"""The shipped constants, and a deterministic fit (reading rows: test_measurements.py)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenmill.perf.calibrate as calibrate
from tests.perf.rows import MODELS, fastest_kernel, row
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrate import _tie_groups, collect, fit, fit_constants, peak_fraction, predict_recorded
from tokenmill.perf.calibrated import ParamTable, load_table, params_for
from tokenmill.perf.params import BOUNDS, ENGINE_FIELDS, GPU_FIELDS, PER_GPU_FIELDS, PerfParams
from tokenmill.perf.row_prediction import predict_rows
from tokenmill.perf.scoring import reason_kind, score


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
    amd_params, amd = params_for("mi355x", None)
    assert any("median of the fitted GPUs'" in n for n in amd) and any("no engine" in n for n in amd)
    assert amd_params.matmul_efficiency != PerfParams().matmul_efficiency


#: One GPU's fitted constants, for tables built by hand
GPU_CONSTANTS = {
    "matmul_efficiency": 0.5,
    "moe_matmul_efficiency": 0.2,
    "fp4_matmul_ratio": 0.3,
    "attention_efficiency": 0.4,
    "weight_bandwidth_efficiency": 0.6,
    "collective_latency_s": 10e-6,
}


def test_a_gpu_outside_the_table_takes_its_siblings_die_and_the_gpus_medians() -> None:
    """MI355X (CDNA 4) has no fitted GPU of its architecture: each per-GPU constant is the median
    over the fitted GPUs, the 4-bit ratio over those with a 4-bit peak (B200, B300, not H100).
    GB300 has one (B300): its kernel efficiencies are B300's, its weight bandwidth and collective
    latency (fitted per GPU alone) the medians."""
    gpu = {**GPU_CONSTANTS, "fp4_matmul_ratio": 0.1}
    table = ParamTable(
        gpus={
            "h100": gpu,
            "b200": {**gpu, "matmul_efficiency": 0.7, "fp4_matmul_ratio": 0.6, "collective_latency_s": 30e-6},
            "b300": {
                **gpu,
                "matmul_efficiency": 0.9,
                "fp4_matmul_ratio": 0.8,
                "collective_latency_s": 40e-6,
                "weight_bandwidth_efficiency": 0.9,
            },
        }
    )
    p, notes = table.resolve("mi355x", None)
    assert p.matmul_efficiency == 0.7  # of 0.5, 0.7, 0.9
    assert p.collective_latency_s == 30e-6  # of 10, 30, 40 µs
    assert p.weight_bandwidth_efficiency == 0.6  # of 0.6, 0.6, 0.9
    assert p.fp4_matmul_ratio == 0.7  # of B200's 0.6 and B300's 0.8; H100's 0.1 left out
    assert p.moe_matmul_efficiency == 0.2
    assert any("median of the fitted GPUs' (b200, b300, h100)" in n for n in notes)
    # GB300: B300's die, the medians' memory and links
    p, notes = table.resolve("gb300", None)
    assert (p.matmul_efficiency, p.fp4_matmul_ratio) == (0.9, 0.8)
    assert (p.collective_latency_s, p.weight_bandwidth_efficiency) == (30e-6, 0.6)
    assert any("b300's fitted kernel efficiencies" in n for n in notes)
    # a fitted GPU keeps its own values
    p, notes = table.resolve("b300", None)
    assert (p.collective_latency_s, p.weight_bandwidth_efficiency) == (40e-6, 0.9)
    assert not any(n.startswith("GPU") for n in notes)
    # a table without GPUs: the priors
    p, notes = ParamTable().resolve("mi355x", None)
    assert p.matmul_efficiency == PerfParams().matmul_efficiency and any("priors for" in n for n in notes)


def test_a_gpu_outside_the_table_takes_the_median_collective_latency_not_its_fabric_siblings() -> None:
    """The fit shares one collective latency between the GPUs of a scale-up fabric, but a GPU the
    table does not name takes the fitted GPUs' median, not its fabric sibling's: GB300 NVL72 does
    not take GB200's. Held out, borrowing the sibling's value left TPOT worse on three of the four
    GPUs it applies to (docs/perf.md §5, "A fabric sibling's collective latency, tried and not
    shipped"); a change to that rule has those runs to repeat."""
    gpu = dict(GPU_CONSTANTS)
    table = ParamTable(
        gpus={
            "h100": {**gpu, "collective_latency_s": 12e-6},
            "b300": {**gpu, "collective_latency_s": 16e-6},
            "gb200": {**gpu, "collective_latency_s": 29e-6},
        }
    )
    p, notes = table.resolve("gb300", "sglang")
    assert p.collective_latency_s == 16e-6  # the median of 12, 16 and 29 µs, not GB200's 29
    assert any("median of the fitted GPUs' weight_bandwidth_efficiency and collective_latency_s" in n for n in notes)


def test_hopper_variants_borrow_a_fitted_hoppers_die_and_other_generations_the_medians() -> None:
    """H800 (H100 with fewer NVLinks) and H20 (a cut-down Hopper) are Hopper dies: their kernel
    efficiencies are the first fitted Hopper's (H100, by name), their memory's and links' the
    fitted GPUs' medians. A100 (Ampere) and MI300X (CDNA 3) share no die with a fitted GPU: every
    per-GPU constant is a median, and the note says so."""
    gpu = dict(GPU_CONSTANTS)
    table = ParamTable(
        gpus={
            "h100": gpu,
            "h200": {**gpu, "matmul_efficiency": 0.55, "weight_bandwidth_efficiency": 0.8},
            "b200": {**gpu, "matmul_efficiency": 0.7, "collective_latency_s": 30e-6},
        }
    )
    for hopper in ("h800", "h20"):
        p, notes = table.resolve(hopper, "vllm")
        assert p.matmul_efficiency == 0.5  # H100's, not H200's 0.55 nor the median
        assert (p.weight_bandwidth_efficiency, p.collective_latency_s) == (0.6, 10e-6)  # medians of three
        assert any(f"GPU {hopper}: not calibrated; using h100's fitted kernel efficiencies" in n for n in notes)
    for other in ("a100", "mi300x"):
        p, notes = table.resolve(other, "vllm")
        assert p.matmul_efficiency == 0.55  # the median of 0.5, 0.55, 0.7
        assert any(f"GPU {other}: not calibrated, nor any GPU of its architecture" in n for n in notes)


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


def test_a_fit_holds_the_fixed_constants_at_the_start_tables_and_moves_the_others() -> None:
    rows = [
        row(id=f"r{c}", silicon_data_source=f"s; silicon_concurrency={c}", silicon_ttft_ms=ttft, silicon_tpot_ms=tpot)
        for c, ttft, tpot in ((1, "80", "9.0"), (8, "160", "11.0"), (32, "420", "16.0"))
    ]
    start = load_table()
    free = ("request_latency_s", "burst_share", "first_token_steps")
    fixed = tuple(k for k in (*GPU_FIELDS, *ENGINE_FIELDS, *calibrate.GLOBAL_FIELDS) if k not in free)
    table, report, _ = fit(rows, MODELS, start, rounds=1, sweeps=2, fixed=fixed)
    assert report.loss_after < report.loss_before
    for k in calibrate.GLOBAL_FIELDS:
        assert table.global_[k] == start.global_[k], k
    for k in GPU_FIELDS:
        assert table.gpus["h100"][k] == start.gpus["h100"][k], k
    moved = [k for k in ENGINE_FIELDS if table.backends["vllm"][k] != start.backends["vllm"][k]]
    assert moved and set(moved) <= set(free), moved


def test_an_anchored_refit_stays_nearer_its_start_the_harder_it_is_pulled() -> None:
    """``anchor``: each constant pulled towards the start table's value (not towards its prior),
    in every round towards the same start; the harder the pull, the closer it stays."""
    rows = [
        row(id=f"r{c}", silicon_data_source=f"s; silicon_concurrency={c}", silicon_ttft_ms=ttft, silicon_tpot_ms=tpot)
        for c, ttft, tpot in ((1, "80", "9.0"), (8, "160", "11.0"), (32, "420", "16.0"))
    ]
    start = load_table()

    def distance(anchor: float) -> float:
        table, _, _ = fit(rows, MODELS, start, rounds=2, sweeps=2, anchor=anchor)
        moved = [table.backends["vllm"][k] / start.backends["vllm"][k] for k in ENGINE_FIELDS]
        moved += [table.gpus["h100"][k] / start.gpus["h100"][k] for k in GPU_FIELDS]
        moved += [table.global_[k] / start.global_[k] for k in calibrate.GLOBAL_FIELDS]
        return float(np.sum(np.log(moved) ** 2))

    free, light, hard = distance(0.0), distance(0.1), distance(100.0)
    assert free > light > hard, (free, light, hard)
    assert hard < 1e-4


def test_kernel_efficiencies_are_shared_by_generation_and_fp4_by_architecture() -> None:
    # H100/H200 are Hopper; B200, GB200 and B300 share the Blackwell SM (B300 is Blackwell Ultra,
    # whose FP4 peak is its own); an unknown GPU stands alone.
    gpus = ["b200", "b300", "gb200", "h100", "h200", "mystery"]
    assert _tie_groups(gpus, "matmul_efficiency") == [[0, 1, 2], [3, 4], [5]]
    assert _tie_groups(gpus, "attention_efficiency") == [[0, 1, 2], [3, 4], [5]]
    assert _tie_groups(gpus, "fp4_matmul_ratio") == [[0, 2], [1], [3, 4], [5]]
    assert _tie_groups(gpus, "weight_bandwidth_efficiency") == [[0], [1], [2], [3], [4], [5]]


def test_a_collective_latency_is_shared_by_the_gpus_of_one_fabric() -> None:
    # HGX H100 and HGX H200 are 8 GPUs on NVLink 4 through one NVSwitch design, HGX B200 and
    # HGX B300 8 GPUs on NVLink 5; GB200's 72-GPU rack is a fabric of its own (the same links, a
    # switch tray between every pair), and an unknown GPU stands alone
    gpus = ["b200", "b300", "gb200", "h100", "h200", "mystery"]
    groups = sorted(_tie_groups(gpus, "collective_latency_s"))
    assert groups == [[0, 1], [2], [3, 4], [5]]


def test_a_fit_gives_hopper_boards_one_collective_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    # H200 rows decoding slower than H100's, on the same links: the two GPUs keep one collective
    # latency (their memories absorb the difference); fitted per GPU, the latencies part
    rows = [
        row(id="h100", tp_size="8", moe_tp_size="8", silicon_ttft_ms="60", silicon_tpot_ms="7"),
        row(id="h200", system="h200_sxm", tp_size="8", moe_tp_size="8", silicon_ttft_ms="55", silicon_tpot_ms="9"),
    ]
    data = collect(predict_rows(rows, MODELS, ParamTable(), record=True))

    def latencies() -> tuple[float, float]:
        table, _ = fit_constants(data, ParamTable(), sweeps=2)
        return table.gpus["h100"]["collective_latency_s"], table.gpus["h200"]["collective_latency_s"]

    h100, h200 = latencies()
    assert h100 == h200
    monkeypatch.setattr(calibrate, "FABRIC_TIED", ())
    h100, h200 = latencies()
    assert h200 > h100, (h100, h200)


def test_gemm_constants_are_pulled_harder_towards_their_benchmark_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fit's pull on the dense GEMM efficiency and the 8-bit ratio is centred on published
    GEMM benchmark values (0.75 of peak, 0.9 ×), not on the uncalibrated defaults (0.55, 0.85), and
    is ten times stronger than on the other constants (docs/perf.md §3)."""
    assert calibrate._log_prior("matmul_efficiency") == pytest.approx(np.log(0.75))
    assert calibrate._log_prior("fp8_matmul_ratio") == pytest.approx(np.log(0.9))
    assert calibrate._log_prior("step_overhead_s") == pytest.approx(np.log(PerfParams().step_overhead_s))
    rows = [
        row(id="a", silicon_data_source="s; silicon_concurrency=4", isl="2048", osl="64", silicon_ttft_ms="500"),
        row(id="b", silicon_data_source="s; silicon_concurrency=16", isl="2048", osl="64", silicon_ttft_ms="1500"),
    ]
    data = collect(predict_rows(rows, MODELS, ParamTable(), record=True))
    shipped = dict(calibrate.PRIOR_WEIGHTS)
    strong, _ = fit_constants(data, ParamTable(), sweeps=2)
    monkeypatch.setattr(calibrate, "PRIOR_WEIGHTS", {})
    weak, _ = fit_constants(data, ParamTable(), sweeps=2)
    monkeypatch.setattr(calibrate, "PRIOR_WEIGHTS", shipped)
    monkeypatch.setattr(calibrate, "BENCHMARK_PRIORS", {})
    centred_low, _ = fit_constants(data, ParamTable(), sweeps=2)

    def gemm(table: ParamTable) -> float:
        return table.gpus["h100"]["matmul_efficiency"]

    # these prefills are slower than the model: the GEMMs are fitted below 0.75 of peak (0.23
    # with the ordinary pull), and ten times the pull holds them nearer it (0.39: the engine's
    # compute_scale takes the rest)
    assert gemm(weak) < gemm(strong) < 0.75
    assert gemm(strong) / gemm(weak) > 1.5
    # the same pull centred on the uncalibrated 0.55 ends lower
    assert gemm(centred_low) < gemm(strong)


def test_the_front_end_latency_is_pulled_towards_its_prior_like_the_gemm_constants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``request_latency_s`` (HTTP, tokenizer, first detokenize) has the GEMM constants' weight
    towards its 20 ms prior: the file cannot tell it from a first token's other fixed costs, and
    without one model's rows a refit doubled it (docs/perf.md §3, "The front end's prior")."""
    assert calibrate.PRIOR_WEIGHTS["request_latency_s"] == calibrate.PRIOR_WEIGHTS["matmul_efficiency"]
    assert calibrate._log_prior("request_latency_s") == pytest.approx(np.log(20e-3))
    # first tokens far slower than the model at one request: a fixed cost the fit can put anywhere
    rows = [
        row(id="a", silicon_data_source="s; silicon_concurrency=1", isl="256", osl="64", silicon_ttft_ms="400"),
        row(id="b", silicon_data_source="s; silicon_concurrency=1", isl="512", osl="64", silicon_ttft_ms="420"),
    ]
    data = collect(predict_rows(rows, MODELS, ParamTable(), record=True))
    strong, _ = fit_constants(data, ParamTable(), sweeps=2)
    weak_weights = {k: v for k, v in calibrate.PRIOR_WEIGHTS.items() if k != "request_latency_s"}
    monkeypatch.setattr(calibrate, "PRIOR_WEIGHTS", weak_weights)
    weak, _ = fit_constants(data, ParamTable(), sweeps=2)

    def front_end(table: ParamTable) -> float:
        return table.backends["vllm"]["request_latency_s"]

    # both fits raise it from 20 ms; the ordinary pull lets it take most of the gap
    assert 20e-3 < front_end(strong) < front_end(weak)
    assert front_end(weak) / front_end(strong) > 1.5


def test_a_gpu_with_few_rows_keeps_its_memory_and_links_near_the_other_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-GPU constants (HBM streaming, collective latency) are pulled towards the other fitted
    GPUs' geometric mean with ``POOL_WEIGHT`` whatever the GPU's own rows: one slow campaign on a
    GPU cannot take its memory system to a bound (GB200 without DeepSeek's rows: docs/perf.md §3,
    "The GPUs' pooled constants")."""
    assert calibrate.POOL_WEIGHT > 0
    # H100 decodes as the uncalibrated model says; H200's one row decodes 2.5 × slower than that,
    # at one request, where a decode step is mostly weights streamed from HBM
    rows = [
        row(id=f"h100-{c}", silicon_data_source=f"s; silicon_concurrency={c}", silicon_ttft_ms=t, silicon_tpot_ms=p)
        for c, t, p in (("1", "40", "4.6"), ("2", "45", "4.8"), ("4", "50", "5.1"))
    ] + [row(id="h200", system="h200_sxm", silicon_data_source="s; silicon_concurrency=1", silicon_tpot_ms="11")]
    data = collect(predict_rows(rows, MODELS, ParamTable(), record=True))
    pooled, _ = fit_constants(data, ParamTable(), sweeps=2)
    monkeypatch.setattr(calibrate, "POOL_WEIGHT", 0.0)
    alone, _ = fit_constants(data, ParamTable(), sweeps=2)

    def bw(table: ParamTable, gpu: str) -> float:
        return table.gpus[gpu]["weight_bandwidth_efficiency"]

    # alone, H200's streaming falls to its 0.3 bound; pooled it stays within a third of H100's
    # (0.75 against 0.98 when written)
    assert bw(alone, "h200") == pytest.approx(BOUNDS["weight_bandwidth_efficiency"][0])
    assert bw(alone, "h200") < 0.5 * bw(pooled, "h200")
    assert bw(pooled, "h200") < bw(pooled, "h100") < 1.4 * bw(pooled, "h200")
    # the kernel efficiencies (shared by Hopper) and the engine's constants are not pooled: with one
    # GPU fitted there is nothing to pool towards, and the fit is the unpooled one
    one = data.without(np.array([i.startswith("h100") for i in data.ids]))
    monkeypatch.setattr(calibrate, "POOL_WEIGHT", 2.0)
    a, _ = fit_constants(one, ParamTable(), sweeps=1)
    monkeypatch.setattr(calibrate, "POOL_WEIGHT", 0.0)
    b, _ = fit_constants(one, ParamTable(), sweeps=1)
    assert a.to_json()["gpus"] == b.to_json()["gpus"]


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
        backends={
            "vllm": {"burst_share": 0.9, "request_latency_s": 0.05, "first_token_steps": 0.5},
            "sglang": {"overhead_scale": 3.0, "first_token_steps": 4.0},
        },
    )
    ttft, tpot = predict_recorded(data, other, np.ones(len(data.ids), dtype=bool))
    replayed = {p.id: p for p in predict_rows(rows, MODELS, other)}
    for i, rid in enumerate(data.ids):
        assert ttft[i] * 1e3 == pytest.approx(replayed[rid].ttft_ms, rel=1e-9)
        assert tpot[i] * 1e3 == pytest.approx(replayed[rid].tpot_ms, rel=1e-9)
    # and the other constants do move the predictions (the check above is not vacuous)
    base_ttft, _ = predict_recorded(data, ParamTable(), np.ones(len(data.ids), dtype=bool))
    assert all(abs(a / b - 1) > 0.05 for a, b in zip(ttft, base_ttft, strict=True))


def test_skip_reasons_are_counted_by_their_kind_without_cutting_a_list_in_parentheses() -> None:
    kind = reason_kind
    assert kind("inconsistent sizes: moe_tp 4 × moe_ep 1 ≠ tp 3 × dp 1") == "inconsistent sizes"
    assert kind("cannot replay: request r0: 10001024 tokens exceed the KV pool") == "cannot replay"
    listed = "unknown backend 'tgi' (known: sglang, vllm, trtllm)"
    assert kind(listed) == listed
    assert kind("unknown system 'a100_sxm'") == "unknown system 'a100_sxm'"
    assert kind("a (b: c) d: e") == "a (b: c) d"
    assert kind("unbalanced ) paren: x") == "unbalanced ) paren"
    # score() counts rows under these kinds: two rows of one cause with different figures, one kind
    rows = [
        row(id="a", tp_size="3", moe_tp_size="4"),
        row(id="b", tp_size="5", moe_tp_size="4"),
        row(id="c", backend="tgi"),
    ]
    reasons = score(predict_rows(rows, str(MODELS), load_table()))["skipped_reasons"]
    assert reasons == {"inconsistent sizes": 2, "unknown backend 'tgi' (known: sglang, vllm, trtllm)": 1}


def test_a_refit_that_leaves_a_gpu_out_does_not_write_constants_for_it() -> None:
    # Leaving H100's rows out of a refit leaves nothing to fit its constants on: the table must not
    # name it (it used to, with its untouched starting values), so that a prediction for it falls
    # back as for any GPU the table does not name, to H200's fitted values (same architecture) for
    # its die
    rows = [
        row(id="h100", silicon_ttft_ms="60", silicon_tpot_ms="7"),
        row(id="h200", system="h200_sxm", silicon_ttft_ms="55", silicon_tpot_ms="5.5"),
        row(id="b200", system="b200_sxm", backend="sglang", silicon_ttft_ms="40", silicon_tpot_ms="4"),
    ]
    data = collect(predict_rows(rows, MODELS, load_table(), record=True))
    assert sorted(data.gpus) == ["b200", "h100", "h200"]
    keep = np.array([i != "h100" for i in data.ids])
    table, _ = fit_constants(data.without(keep), ParamTable(), sweeps=1)
    assert sorted(table.gpus) == ["b200", "h200"]
    assert sorted(table.backends) == ["sglang", "vllm"]
    h100, notes = table.resolve("h100", "vllm")
    assert any("using h200's fitted kernel efficiencies" in n for n in notes)
    for k in GPU_FIELDS:
        # the die's constants from H200; weight bandwidth and collective latency the medians of
        # two GPUs (H200 and B200), the mean of the two
        both = (table.gpus["h200"][k] + table.gpus["b200"][k]) / 2
        assert getattr(h100, k) == pytest.approx(both if k in PER_GPU_FIELDS else table.gpus["h200"][k]), k
    # and a refit without the SGLang row names no SGLang constants
    table, _ = fit_constants(data.without(np.array([i != "b200" for i in data.ids])), ParamTable(), sweeps=1)
    assert sorted(table.backends) == ["vllm"] and "b200" not in table.gpus


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[]", "expected a JSON object, got list"),
        (b'{"meta": 5}', "'meta' must be an object (got int)"),
        (b'{"gpus": 1}', "'gpus' must be an object (got int)"),
        (b'{"backends": [1]}', "'backends' must be an object (got list)"),
        (b"\xff\xfe", "not a UTF-8 JSON file"),
        (b"{", "not valid JSON"),
    ],
)
def test_a_params_file_of_the_wrong_shape_is_one_error(tmp_path: Path, content: bytes, message: str) -> None:
    """Found by fuzzing `predict --params`: each of these was an AttributeError, TypeError or
    UnicodeDecodeError traceback."""
    path = tmp_path / "params.json"
    path.write_bytes(content)
    with pytest.raises(TokenmillError) as exc:
        load_table(path)
    assert message in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=30))
def test_each_measurement_weighs_one_however_many_rows_report_it(keys: list[int]) -> None:
    w = calibrate.measurement_weights(keys)
    assert w.sum() == pytest.approx(len(set(keys)))
    for k in set(keys):
        group = [w[i] for i, x in enumerate(keys) if x == k]
        assert group == pytest.approx([1 / len(group)] * len(group))


def test_a_measurement_reported_twice_pulls_the_fit_as_once() -> None:
    """The calibration file reports some benchmark points twice (two source files, or under both
    DeepSeek-R1 and DeepSeek-V3): the fit counts a measurement once, so a copy of a row under
    another id leaves the fitted constants as they were (docs/perf.md §3)."""
    a = row(id="a", silicon_data_source="s; silicon_concurrency=4", isl="2048", osl="64", silicon_ttft_ms="500")
    b = row(id="b", silicon_data_source="s; silicon_concurrency=16", isl="2048", osl="64", silicon_ttft_ms="1500")
    copy = dict(a, id="a-copy")
    once = collect(predict_rows([a, b], MODELS, ParamTable(), record=True))
    twice = collect(predict_rows([a, b, copy], MODELS, ParamTable(), record=True))
    counted = collect(predict_rows([a, b, copy], MODELS, ParamTable(), record=True), dedupe=False)
    assert once.weights().tolist() == [1.0, 1.0]
    assert dict(zip(twice.ids, twice.weights().tolist(), strict=True)) == {"a": 0.5, "b": 1.0, "a-copy": 0.5}
    assert counted.weights().tolist() == [1.0, 1.0, 1.0]
    # a subset keeps its rows' weights
    assert twice.without(np.array([True, False, True])).weights().tolist() == [0.5, 0.5]
    t_once, r_once = fit_constants(once, ParamTable(), sweeps=2)
    t_twice, r_twice = fit_constants(twice, ParamTable(), sweeps=2)
    t_counted, _ = fit_constants(counted, ParamTable(), sweeps=2)
    assert r_twice.loss_after == pytest.approx(r_once.loss_after, rel=1e-9)
    assert t_twice.to_json()["global"] == pytest.approx(t_once.to_json()["global"], rel=1e-9)
    assert t_twice.to_json()["backends"] == t_once.to_json()["backends"]
    # counted per row, the copy pulls: the fitted constants move
    moved = {k: t_counted.to_json()["global"][k] / v for k, v in t_once.to_json()["global"].items()}
    assert max(abs(m - 1) for m in moved.values()) > 0.01


def test_the_constants_a_refit_moved_are_listed_largest_move_first() -> None:
    start = ParamTable(
        global_={"step_overhead_s": 1e-3, "fp8_matmul_ratio": 0.9},
        gpus={"h100": {"matmul_efficiency": 0.8, "collective_latency_s": 2e-5}},
        backends={"vllm": {"burst_share": 0.6}},
    )
    fitted = ParamTable(
        global_={"step_overhead_s": 1.04e-3, "fp8_matmul_ratio": 1.1},
        gpus={"h100": {"matmul_efficiency": 0.6, "collective_latency_s": 2e-5}, "b200": {"matmul_efficiency": 0.7}},
        backends={"vllm": {"burst_share": 0.15}},
    )
    assert fitted.moved_from(start) == [
        ("backends.vllm.burst_share", 0.6, 0.15),
        ("gpus.h100.matmul_efficiency", 0.8, 0.6),
        ("global.fp8_matmul_ratio", 0.9, 1.1),
        # a GPU the start does not hold, from what the start gives it: the fitted GPUs' median
        ("gpus.b200.matmul_efficiency", 0.8, 0.7),
    ]  # a 4 % move and an unchanged one are not listed
    assert [k for k, _, _ in fitted.moved_from(start, least=0.01)][-1] == "global.step_overhead_s"
    assert start.moved_from(start) == []


def test_a_refit_on_a_gpu_the_start_does_not_hold_starts_where_predict_puts_it() -> None:
    """A deployment's rows on a GPU outside the start table (here H800, a Hopper: H100's die and
    the fitted GPUs' medians for its memory and links) are fitted from the constants ``predict``
    gives that GPU, not from the priors: with every constant pinned but one engine constant, the
    GPU's written constants are those ``resolve`` gave it, where they used to be the priors (a
    grouped-GEMM efficiency of 0.45 where the fitted GPUs' median is 0.2)."""
    gpu = dict(GPU_CONSTANTS)
    start = ParamTable(gpus={"h100": gpu, "h200": {**gpu, "weight_bandwidth_efficiency": 0.8}})
    resolved = start.gpu_values("h800")
    assert resolved == {**gpu, "weight_bandwidth_efficiency": 0.7}  # the median of 0.6 and 0.8
    rows = [
        row(
            id=f"h800-c{c}",
            system="h800",
            isl="512",
            osl="64",
            batch_size=str(c),
            silicon_data_source=f"s; silicon_concurrency={c}",
            silicon_ttft_ms=str(ttft),
            silicon_tpot_ms=str(tpot),
        )
        for c, ttft, tpot in ((1, "40", "7.0"), (8, "90", "9.5"))
    ]
    others = [f.name for f in fields(PerfParams) if f.name != "request_latency_s"]
    fitted, _, _ = fit(rows, MODELS, start, rounds=1, sweeps=1, fixed=others)
    assert fitted.gpus["h800"] == pytest.approx(resolved)
    moved = {k for k, _, _ in fitted.moved_from(start)}
    assert not any(k.startswith("gpus.h800") for k in moved)


def closed_loop_rows(
    isl: int, osl: int, points: tuple[tuple[int, str, str], ...], **cells: str
) -> list[dict[str, str]]:
    """Measured rows of one deployment (H100 under vLLM): (lanes, TTFT ms, TPOT ms) each."""
    return [
        row(
            id=f"r{c}",
            silicon_data_source=f"s; silicon_concurrency={c}",
            isl=str(isl),
            osl=str(osl),
            silicon_ttft_ms=ttft,
            silicon_tpot_ms=tpot,
            **cells,
        )
        for c, ttft, tpot in points
    ]


def refit_from_shipped(rows: list[dict[str, str]], ceiling: float | None) -> PerfParams:
    """H100's constants under vLLM after a refit of ``rows`` from the shipped table, barely anchored."""
    table, _, _ = fit(rows, MODELS, load_table(), rounds=1, sweeps=3, anchor=0.0001, ceiling=ceiling)
    return table.resolve("h100", "vllm")[0]


def test_a_ceiling_keeps_a_refits_kernels_under_their_peak() -> None:
    """Rows whose long prompts come back faster than any kernel could process them: a refit buys
    the speed by raising the GEMM constants until an FP8 GEMM runs above its peak; with a
    ``ceiling`` every kernel of the rows' steps stays at or under that fraction of it."""
    rows = closed_loop_rows(8192, 16, ((1, "40", "6"), (4, "90", "6")), gemm_quant_mode="fp8")
    assert fastest_kernel(refit_from_shipped(rows, None)) > 1.0
    assert fastest_kernel(refit_from_shipped(rows, 0.95)) <= 0.95 + 1e-9


def test_a_ceiling_keeps_a_refits_weight_stream_under_it() -> None:
    """Rows that decode faster than the weights could stream at the constants' bound (0.98 of
    HBM bandwidth): a refit takes the bound; with a ``ceiling`` the bandwidth stays under it."""
    rows = closed_loop_rows(256, 512, ((1, "30", "1.5"), (4, "30", "1.6")))
    bound = BOUNDS["weight_bandwidth_efficiency"][1]
    assert refit_from_shipped(rows, None).weight_bandwidth_efficiency == pytest.approx(bound, rel=1e-3)
    assert refit_from_shipped(rows, 0.9).weight_bandwidth_efficiency <= 0.9 + 1e-9


def test_the_fastest_kernel_is_a_gemm_at_its_ratio_where_the_step_runs_it() -> None:
    p = PerfParams(
        matmul_efficiency=0.8,
        moe_matmul_efficiency=0.5,
        attention_efficiency=0.4,
        compute_scale=1.1,
        fp8_matmul_ratio=1.2,
        fp4_matmul_ratio=0.5,
    )
    assert peak_fraction(p) == pytest.approx(0.88)  # 16-bit GEMMs: 0.8 × 1.1
    assert peak_fraction(p, uses8=True) == pytest.approx(1.056)  # 0.8 × 1.2 × 1.1
    assert peak_fraction(p, uses4=True) == pytest.approx(0.88)  # a 4-bit ratio under 1 binds nothing
    steps = peak_fraction(p, np.array([False, True]), np.array([False, False]))
    assert steps.tolist() == pytest.approx([0.88, 1.056])
    attention = PerfParams(matmul_efficiency=0.3, attention_efficiency=0.6, compute_scale=1.0)
    assert peak_fraction(attention) == pytest.approx(0.6)
