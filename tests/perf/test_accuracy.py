"""Error bands (`perf.accuracy`): what they hold, which one a prediction gets, and bad files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.perf.accuracy import (
    MIN_ROWS,
    REFIT_OTHER,
    REFIT_SAME,
    AccuracyTable,
    ErrorBand,
    Scored,
    band_for,
    fingerprint,
    load_accuracy,
    measure,
    model_key,
    shipped_accuracy_path,
)
from tokenmill.perf.calibrated import shipped_path
from tokenmill.spec import load_model

from .rows import MODELS


def rows(gpu: str, backend: str, ratios: list[float], models: int = 2) -> list[Scored]:
    """Rows predicted at 100 ms / 10 ms whose measurements are ``ratio`` × the prediction, spread
    over ``models`` models."""
    return [Scored(gpu, backend, f"m{i % models}", 100.0, 100.0 * r, 10.0, 10.0 * r) for i, r in enumerate(ratios)]


def test_band_statistics_by_hand() -> None:
    # measured/predicted 0.5, 0.8, 1.0, 1.25, 2.0: APE = |1/r - 1| = 1.0, 0.25, 0.0, 0.2, 0.5
    bands = measure(rows("h100", "vllm", [0.5, 0.8, 1.0, 1.25, 2.0]))
    assert set(bands) == {"all", "vllm", "h100/vllm"}
    b = bands["h100/vllm"]
    assert b.rows == 5 and b.models == 2
    assert b.ttft_median_ape == pytest.approx(0.25)  # sorted 0, 0.2, 0.25, 0.5, 1.0
    assert b.tpot_median_ape == pytest.approx(0.25)
    # p90 by linear interpolation between the 4th (0.5) and 5th (1.0) of 5: 0.5 + 0.6 × 0.5
    assert b.ttft_p90_ape == pytest.approx(0.8)
    # measured ÷ predicted 0.5 0.8 1.0 1.25 2.0: p10 = 0.5 + 0.4 × 0.3, p90 = 1.25 + 0.6 × 0.75
    assert b.ttft_ratio_p10 == pytest.approx(0.62)
    assert b.ttft_ratio_p90 == pytest.approx(1.7)
    assert b.interval("ttft", 200.0) == pytest.approx((124.0, 340.0))
    assert b.interval("tpot", 10.0) == pytest.approx((6.2, 17.0))


def test_rows_without_positive_numbers_are_left_out() -> None:
    good = rows("b200", "sglang", [1.0, 1.0])
    bad = [Scored("b200", "sglang", "m", 0.0, 10.0, 1.0, 1.0), Scored("b200", "sglang", "m", math.nan, 10.0, 1.0, 1.0)]
    assert measure(good + bad)["all"].rows == 2
    assert measure(bad) == {}


def test_band_falls_back_from_gpu_to_engine_to_all() -> None:
    data = rows("h100", "vllm", [1.1] * MIN_ROWS) + rows("b300", "vllm", [0.5] * (MIN_ROWS - 1))
    data += rows("h200", "sglang", [2.0] * 3)
    data += rows("h100", "trtllm", [1.0] * MIN_ROWS, models=1)  # one model's campaign: the engine's
    table = AccuracyTable("x", measure(data), {})
    assert table.band("h100", "vllm").scope == "h100/vllm"  # type: ignore[union-attr]
    assert table.band("b300", "vllm").scope == "vllm"  # type: ignore[union-attr]  # 19 rows: the engine's
    assert table.band("h200", "sglang").scope == "all"  # type: ignore[union-attr]  # 3 sglang rows in all
    assert table.band("h200", "trtllm").scope == "all"  # type: ignore[union-attr]
    assert table.band("h100", "trtllm").scope == "all"  # type: ignore[union-attr]  # trtllm: one model
    assert table.groups["h100/trtllm"].rows == MIN_ROWS
    assert AccuracyTable("x", measure(rows("h100", "vllm", [1.0] * 3)), {}).band("h100", "vllm") is None


def test_round_trip_and_fingerprint_gate(tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text('{"global": {}}\n')
    table = AccuracyTable(fingerprint(params), measure(rows("h100", "vllm", [1.0, 1.2] * MIN_ROWS)), {"n": 1})
    path = tmp_path / "acc.json"
    table.write(path)
    back = load_accuracy(path)
    assert back is not None and back.params_sha256 == table.params_sha256
    assert back.groups["h100/vllm"].rows == 2 * MIN_ROWS
    band, note, _ = band_for("h100", "vllm", params, path)
    assert band is not None and band.scope == "h100/vllm" and "40 rows, 2 models" in note
    params.write_text('{"global": {"step_overhead_s": 0.002}}\n')  # refitted, not re-evaluated
    band, note, _ = band_for("h100", "vllm", params, path)
    assert band is None and "other constants" in note
    band, note, _ = band_for("h100", "vllm", tmp_path / "none.json", path)  # no constants file: the priors
    assert band is None and "other constants" in note


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "'groups' must be an object"),
        ('{"groups": {}}', "meta.params_sha256"),
        ('{"meta": {"params_sha256": "a"}, "groups": {"all": 3}}', "groups.all must be an object"),
        ('{"meta": {"params_sha256": "a"}, "groups": {"all": {"scope": "all"}}}', "groups.all lacks rows"),
        ("{", "not valid JSON"),
    ],
)
def test_malformed_files_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "acc.json"
    path.write_text(text)
    with pytest.raises(TokenmillError, match=message):
        load_accuracy(path)


def test_bad_numbers_and_unknown_fields(tmp_path: Path) -> None:
    band = measure(rows("h100", "vllm", [1.0] * 3))["all"].to_dict()
    path = tmp_path / "acc.json"
    for key, value, message in (
        ("rows", 0, "rows must be a positive integer"),
        ("ttft_p90_ape", -1, "ttft_p90_ape must be a finite number"),
        ("speed", 1.0, "unknown field 'speed'"),
    ):
        path.write_text(json.dumps({"meta": {"params_sha256": "a"}, "groups": {"all": {**band, key: value}}}))
        with pytest.raises(TokenmillError, match=message):
            load_accuracy(path)
    with pytest.raises(TokenmillError, match="no such accuracy file"):
        load_accuracy(tmp_path / "none.json")


def test_shipped_bands_were_measured_with_the_shipped_constants() -> None:
    """A refit must be followed by `calibrate evaluate ... --accuracy-out` (docs/perf.md §4)."""
    table = load_accuracy(shipped_accuracy_path())
    assert table is not None
    assert table.params_sha256 == fingerprint(shipped_path())
    assert table.groups["all"].rows > 3000  # the fully specified rows of the calibration file
    # the seven architectures of the file (DeepSeek-R1 and -V3 are one), and every row held out once
    assert len(table.models) == 7 and model_key(load_model("deepseek-v3")) in table.models
    assert table.held_out["all"].rows == table.groups["all"].rows
    # every GPU held out once by architecture, and by GPU all but B300 (the only Blackwell Ultra:
    # held out, it has no sibling to borrow from, so its rows are the architecture's case)
    assert table.held_out_architecture["all"].rows == table.groups["all"].rows
    b300 = sum(b.rows for k, b in table.groups.items() if k.startswith("b300/"))
    assert table.held_out_gpu["all"].rows == table.groups["all"].rows - b300
    assert not any(k.startswith("b300/") for k in table.held_out_gpu)
    # the refit bands (benchmarks/deployment_refit.py --accuracy): 412 rows at the measured lengths
    # and 1,701 at others, the run of docs/perf.md "The band of a deployment's own refit"
    assert (table.refit_same_lengths["all"].rows, table.refit_other_lengths["all"].rows) == (412, 1701)


def test_model_key_is_the_architecture_not_the_name_or_the_quantisation() -> None:
    """A preset and the config.json of the same model, or an 8-bit checkpoint and its base, are one
    model to the bands (as in leave-one-model-out); different architectures are not."""
    config = model_key(load_model(str(MODELS / "deepseek-ai--DeepSeek-R1_config.json")))
    assert model_key(load_model("deepseek-r1")) == config == "mla_moe/61L/7168h/129280v/256e"
    fp8 = load_model(str(MODELS / "Qwen--Qwen3-235B-A22B-FP8_config.json"))
    assert model_key(fp8) == model_key(load_model(str(MODELS / "Qwen--Qwen3-235B-A22B_config.json")))
    assert model_key(load_model("kimi-k3")) != model_key(load_model("kimi-k2"))
    assert model_key(load_model("llama-3.1-8b")) == "dense_gqa/32L/4096h/128256v/0e"


def test_a_model_outside_the_calibration_file_takes_the_held_out_band(tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text('{"global": {}}\n')
    in_sample = measure(rows("h100", "vllm", [1.0, 1.2] * MIN_ROWS))
    held = measure(rows("h100", "vllm", [0.5, 2.0] * MIN_ROWS))  # held out: wider
    path = tmp_path / "acc.json"
    AccuracyTable(fingerprint(params), in_sample, {}, ("seen/1L",), held).write(path)
    back = load_accuracy(path)
    assert back is not None and back.models == ("seen/1L",) and back.held_out["all"].ttft_ratio_p10 == 0.5
    band, note, held_out = band_for("h100", "vllm", params, path, model="seen/1L")
    assert not held_out and band is not None and band.ttft_ratio_p10 == 1.0
    assert note.startswith("error band from the calibration rows of h100/vllm")
    band, note, held_out = band_for("h100", "vllm", params, path)  # no model given: the calibration rows'
    assert not held_out and band is not None and band.ttft_ratio_p10 == 1.0
    band, note, held_out = band_for("h100", "vllm", params, path, model="unseen/2L")
    assert held_out and band is not None and band.ttft_ratio_p10 == 0.5 and band.ttft_ratio_p90 == 2.0
    assert note.startswith("error band from held-out predictions of h100/vllm") and "not in the calibration" in note
    # no held-out bands in the file: the calibration rows' band, said to be for other models
    AccuracyTable(fingerprint(params), in_sample, {}, ("seen/1L",)).write(path)
    band, note, held_out = band_for("h100", "vllm", params, path, model="unseen/2L")
    assert not held_out and band is not None and band.ttft_ratio_p10 == 1.0 and "not among them" in note


def test_malformed_held_out_parts_name_the_field(tmp_path: Path) -> None:
    band = measure(rows("h100", "vllm", [1.0] * 3))["all"].to_dict()
    base = {"meta": {"params_sha256": "a"}, "groups": {"all": band}}
    path = tmp_path / "acc.json"
    for extra, message in (
        ({"models": "mla_moe"}, "'models' must be a list of strings"),
        ({"held_out_groups": []}, "'held_out_groups' must be an object"),
        ({"held_out_groups": {"all": {**band, "rows": 0}}}, "held_out_groups.all.rows must be a positive integer"),
    ):
        path.write_text(json.dumps({**base, **extra}))
        with pytest.raises(TokenmillError, match=message):
            load_accuracy(path)


def test_a_gpu_outside_the_calibration_file_takes_the_band_of_gpus_held_out_like_it(tmp_path: Path) -> None:
    """H100 rows scored; H200 is a Hopper (predicted with H100's constants, as a GPU held out and
    predicted from its architecture's other GPU), MI355X a new architecture (the fitted GPUs' medians)."""
    params = tmp_path / "params.json"
    params.write_text('{"global": {}}\n')
    in_sample = measure(rows("h100", "vllm", [1.0, 1.2] * MIN_ROWS))
    by_gpu = measure(rows("h100", "vllm", [0.7, 1.6] * MIN_ROWS))
    by_arch = measure(rows("h100", "vllm", [0.4, 2.5] * MIN_ROWS))
    by_model = measure(rows("h100", "vllm", [0.5, 2.0] * MIN_ROWS))
    path = tmp_path / "acc.json"
    AccuracyTable(fingerprint(params), in_sample, {}, ("seen/1L",), by_model, by_gpu, by_arch).write(path)
    back = load_accuracy(path)
    assert back is not None and back.gpus == {"h100"}
    assert back.held_out_gpu["all"].ttft_ratio_p10 == 0.7 and back.held_out_architecture["all"].ttft_ratio_p90 == 2.5
    # a scored GPU and model: the calibration rows' band
    band, note, held_out = band_for("h100", "vllm", params, path, model="seen/1L")
    assert held_out == "" and band is not None and band.ttft_ratio_p10 == 1.0
    # a Hopper the file does not hold: the GPU held-out band, saying whose constants it borrows
    band, note, held_out = band_for("h200", "vllm", params, path, model="seen/1L")
    assert held_out == "gpu" and band is not None and band.ttft_ratio_p10 == 0.7
    assert "h200 is not in the calibration file; its constants are h100's (same architecture;" in note
    assert band.scope == "vllm" and "no h200/vllm group" in note  # its own group is not in the file
    # a new architecture: the architecture held-out band (the fitted GPUs' medians)
    band, note, held_out = band_for("mi355x", "vllm", params, path, model="seen/1L")
    assert held_out == "architecture" and band is not None and band.ttft_ratio_p90 == 2.5
    assert "its constants are the medians of the fitted GPUs'" in note
    # a new GPU and a new model: the wider of the two held-out bands, and the note says both are new
    band, note, held_out = band_for("mi355x", "vllm", params, path, model="unseen/2L")
    assert held_out == "architecture" and band is not None and band.ttft_ratio_p90 == 2.5  # 0.4–2.5 > 0.5–2.0
    assert "the model is not in the calibration file either, and its model held-out band is narrower" in note
    band, note, held_out = band_for("h200", "vllm", params, path, model="unseen/2L")
    assert held_out == "model" and band is not None and band.ttft_ratio_p90 == 2.0  # 0.5–2.0 > 0.7–1.6
    assert "h200 is not in the calibration file either, and its GPU held-out band is narrower" in note
    # a new model on a scored GPU: the model held-out band, as before
    assert band_for("h100", "vllm", params, path, model="unseen/2L").held_out == "model"
    # without GPU held-out bands: the calibration rows' band, said to be for other GPUs
    AccuracyTable(fingerprint(params), in_sample, {}, ("seen/1L",), by_model).write(path)
    band, note, held_out = band_for("h200", "vllm", params, path, model="seen/1L")
    assert held_out == "" and band is not None and band.ttft_ratio_p10 == 1.0
    assert "h200 is not among them, and a GPU held out of the fit misses by more" in note
    band, note, held_out = band_for("h200", "vllm", params, path, model="unseen/2L")  # only the model's held out
    assert held_out == "model" and "h200 is not in the calibration file either, and a GPU held out" in note


def test_malformed_gpu_held_out_and_refit_sections_name_the_field(tmp_path: Path) -> None:
    band = measure(rows("h100", "vllm", [1.0] * 3))["all"].to_dict()
    base = {"meta": {"params_sha256": "a"}, "groups": {"all": band}}
    path = tmp_path / "acc.json"
    for extra, message in (
        ({"held_out_gpu_groups": [1]}, "'held_out_gpu_groups' must be an object"),
        (
            {"held_out_architecture_groups": {"all": {**band, "models": 0}}},
            "held_out_architecture_groups.all.models must be a positive integer",
        ),
        ({"refit_same_lengths_groups": [1]}, "'refit_same_lengths_groups' must be an object"),
        (
            {"refit_other_lengths_groups": {"vllm": {**band, "rows": -1}}},
            "refit_other_lengths_groups.vllm.rows must be a positive integer",
        ),
    ):
        path.write_text(json.dumps({**base, **extra}))
        with pytest.raises(TokenmillError, match=message):
            load_accuracy(path)


def test_log_width_measures_both_intervals_and_survives_a_zero() -> None:
    b = measure(rows("h100", "vllm", [0.5, 2.0] * 5))["all"]
    # p10 and p90 of measured ÷ predicted for a 50/50 mix of 0.5 and 2.0: 0.5 and 2.0 for both metrics
    assert b.log_width() == pytest.approx(2 * math.log(4.0))
    zero = ErrorBand(**{**b.to_dict(), "ttft_ratio_p10": 0.0})
    assert math.isfinite(zero.log_width()) and zero.log_width() > b.log_width()


def test_constants_refitted_on_a_deployments_runs_take_the_refit_band_of_their_lengths(tmp_path: Path) -> None:
    """A refit (``meta.start_sha256`` the constants the file measured, ``meta.fit_points`` its
    runs): the same-lengths band at a fitted ISL/OSL, the other-lengths band elsewhere, no band
    for another GPU, engine or model (a note naming the fitted deployment), and the plain "other
    constants" note for a refit from constants the file did not measure."""
    shipped = tmp_path / "params.json"
    shipped.write_text('{"global": {}}\n')
    in_sample = measure(rows("h100", "vllm", [1.0, 1.2] * MIN_ROWS))
    same = measure(rows("h100", "vllm", [0.9, 1.1] * MIN_ROWS))
    other = measure(rows("h100", "vllm", [0.6, 1.7] * MIN_ROWS))
    path = tmp_path / "acc.json"
    AccuracyTable(
        fingerprint(shipped), in_sample, {}, ("dense/1L",), refit_same_lengths=same, refit_other_lengths=other
    ).write(path)
    back = load_accuracy(path)
    assert back is not None and back.refit_same_lengths["all"].ttft_ratio_p10 == 0.9
    assert back.refit_other_lengths["h100/vllm"].ttft_ratio_p90 == 1.7
    mine = tmp_path / "mine.json"
    points = [["h100", "vllm", "dense/1L", 1024, 256, c] for c in (4, 64)]
    meta: dict[str, object] = {"start_sha256": fingerprint(shipped), "fit_points": points}
    mine.write_text(json.dumps({"meta": meta, "global": {"step_overhead_s": 0.002}}))
    band, note, kind = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(1024, 256))
    assert kind == REFIT_SAME and band is not None and (band.ttft_ratio_p10, band.ttft_ratio_p90) == (0.9, 1.1)
    assert note.startswith("error band of a deployment refitted on its own runs, at the prompt and answer lengths")
    band, note, kind = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(4096, 256))
    assert kind == REFIT_OTHER and band is not None and (band.ttft_ratio_p10, band.ttft_ratio_p90) == (0.6, 1.7)
    assert "at other lengths than it was refitted on" in note
    for gpu, backend, model in (("h200", "vllm", "dense/1L"), ("h100", "sglang", "dense/1L"), ("h100", "vllm", "x/2L")):
        band, note, kind = band_for(gpu, backend, mine, path, model=model, lengths=(1024, 256))
        assert band is None and kind == "", (gpu, backend, model)
        assert "refitted on runs of dense on h100 under vllm, and a refit's band holds for its own deployment" in note
    # a refit on one run: no band (the bands were measured on refits of two or three)
    meta["fit_points"] = points[:1]
    mine.write_text(json.dumps({"meta": meta, "global": {"step_overhead_s": 0.002}}))
    band, note, _ = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(1024, 256))
    assert band is None and "refitted on one run of this deployment" in note
    meta["fit_points"] = [["h100", "vllm", 7, 1024, 256, 4], ["h100"]]  # edited: no point it can read
    mine.write_text(json.dumps({"meta": meta, "global": {"step_overhead_s": 0.002}}))
    band, note, _ = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(1024, 256))
    assert band is None and "accuracy.json was measured with other constants" in note
    meta["fit_points"] = points
    meta["start_sha256"] = "another"
    mine.write_text(json.dumps({"meta": meta, "global": {"step_overhead_s": 0.002}}))
    band, note, _ = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(1024, 256))
    assert band is None and "accuracy.json was measured with other constants" in note
    # a file without refit bands: the refit gets the "other constants" note too
    meta["start_sha256"] = fingerprint(shipped)
    mine.write_text(json.dumps({"meta": meta, "global": {"step_overhead_s": 0.002}}))
    AccuracyTable(fingerprint(shipped), in_sample, {}, ("dense/1L",)).write(path)
    band, note, _ = band_for("h100", "vllm", mine, path, model="dense/1L", lengths=(1024, 256))
    assert band is None and "accuracy.json was measured with other constants" in note
