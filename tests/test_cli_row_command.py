"""A measured row as a ``tokenmill predict`` command (``cli.row_command``) and ``calibrate row``.

The command is checked by running it: ``predict`` parses its flags into a plan and replays it, the
calibration path reads the row's cells into a ``RowSpec`` and replays that; the two must give the
same TTFT and TPOT (``predict --json`` rounds TTFT to 3 decimals and TPOT to 4: rel 1e-4)."""

from __future__ import annotations

import csv
import fnmatch
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.cli_helpers import cli, cli_json
from tests.perf.rows import MODELS, row
from tokenmill.cli import calibrate_row_cmd
from tokenmill.cli.row_command import predict_argv, weight_format_flag
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.measurements import RowSpec, interpret
from tokenmill.perf.row_prediction import predict_row, predict_spec

DEEPSEEK = {"model_path": "deepseek-ai/DeepSeek-R1", "isl": "1024", "osl": "1024"}

ROWS = {
    "vllm 16-bit": {},
    "trtllm fp8 with a release": {
        "model_path": "meta-llama/Llama-3.1-70B",
        "system": "b200_sxm",
        "backend": "trtllm",
        "backend_version": "1.2.0rc2",
        "precision": "fp8",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "silicon_data_source": "x; silicon_concurrency=4",
    },
    "sglang fp8 GEMMs, block-fp8 experts": {
        **DEEPSEEK,
        "system": "b200_sxm",
        "backend": "sglang",
        "backend_version": "0.5.9",
        "precision": "fp8",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8_block",
        "tp_size": "8",
        "moe_tp_size": "8",
        "silicon_data_source": "x; silicon_concurrency=16",
    },
    "trtllm nvfp4, attention DP 8 × EP 8": {
        **DEEPSEEK,
        "system": "b200_sxm",
        "backend": "trtllm",
        "precision": "fp4",
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
        "tp_size": "1",
        "attention_dp_size": "8",
        "moe_tp_size": "1",
        "moe_ep_size": "8",
        "batch_size": "8",
        "silicon_data_source": "x; silicon_concurrency=64",
    },
    "vllm pipeline of 2": {
        "model_path": "meta-llama/Llama-3.1-70B",
        "system": "h100_sxm",
        "tp_size": "4",
        "pp_size": "2",
        "moe_tp_size": "4",
    },
    "repaired product sizes": {
        **DEEPSEEK,
        "system": "b200_sxm",
        "backend": "sglang",
        "precision": "fp8",
        "tp_size": "64",
        "moe_tp_size": "8",
        "moe_ep_size": "8",
        "silicon_data_source": "x; silicon_concurrency=8",
    },
    "disaggregated, DP-attention decode workers": {
        **DEEPSEEK,
        "isl": "8192",
        "mode": "disagg",
        "system": "h200_sxm",
        "backend": "sglang",
        "precision": "fp8",
        "tp_size": "",
        "moe_tp_size": "",
        "moe_ep_size": "",
        "batch_size": "",
        "prefill_tp_size": "8",
        "prefill_moe_tp_size": "8",
        "prefill_num_workers": "2",
        "prefill_batch_size": "1",
        "decode_tp_size": "1",
        "decode_attention_dp_size": "8",
        "decode_moe_ep_size": "8",
        "decode_num_workers": "1",
        "decode_batch_size": "16",
        "silicon_data_source": "x; silicon_concurrency=128",
    },
}


def _spec(cells: dict[str, str]) -> RowSpec:
    spec = interpret(row(**cells), MODELS)
    assert isinstance(spec, RowSpec), spec
    return spec


def _same_answer(spec: RowSpec, capsys: pytest.CaptureFixture[str]) -> None:
    """The command answers what the calibration path predicts, or refuses as it skips."""
    expected = predict_spec(spec, load_table())
    code, out, err = cli(capsys, *predict_argv(spec), "--json")
    if not expected.predicted:
        assert code == 2 and out == "", err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
        return
    assert code == 0, err
    got = json.loads(out)
    assert got["ttft_ms"] == pytest.approx(expected.ttft_ms, rel=1e-4)
    assert got["tpot_ms"] == pytest.approx(expected.tpot_ms, rel=1e-4)


@pytest.mark.parametrize("name", list(ROWS))
def test_a_rows_predict_command_answers_what_evaluate_predicts_for_it(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(ROWS[name])
    assert predict_spec(spec, load_table()).predicted  # each case is a row the model predicts
    _same_answer(spec, capsys)


def test_the_command_spells_out_the_rows_reading() -> None:
    argv = predict_argv(_spec(ROWS["disaggregated, DP-attention decode workers"]))
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert argv[0] == "predict" and Path(flags["--model"]).name == "deepseek-ai--DeepSeek-R1_config.json"
    assert flags["--gpu"] == "h200" and flags["--gpus"] == "8" and flags["--tp"] == "8"
    assert flags["--kv-cache-dtype"] == "fp8_e4m3" and flags["--prefix-cache"] == "off"
    assert flags["--mem-fraction-static"] == "0.95"
    assert flags["--prefill-workers"] == "2" and flags["--decode-workers"] == "1" and flags["--decode-gpus"] == "8"
    assert flags["--decode-layout"] == "tp=8,ep=8,pp=1,dp-attention=8,moe-a2a-backend=deepep"
    assert flags["--concurrency"] == "128" and flags["--isl"] == "8192"
    repaired = predict_argv(_spec(ROWS["repaired product sizes"]))
    assert repaired[repaired.index("--gpus") + 1] == "8" and "--ep" in repaired


def test_a_row_that_does_not_fit_is_refused_by_its_command_too(capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec({**DEEPSEEK, "system": "h100_sxm", "backend": "sglang"})
    assert "does not fit" in predict_spec(spec, load_table()).skipped_reason
    code, out, err = cli(capsys, *predict_argv(spec), "--json")
    assert code == 2 and out == "" and "does not fit" in err


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    backend=st.sampled_from(["sglang", "vllm", "trtllm"]),
    model=st.sampled_from(["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B"]),
    system=st.sampled_from(["h100_sxm", "h200_sxm", "b200_sxm"]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    formats=st.sampled_from(
        [("", "", ""), ("fp8", "fp8", "fp8"), ("fp8", "fp8", "fp8_block"), ("fp4", "nvfp4", "nvfp4")]
    ),
    isl=st.integers(16, 4096),
    osl=st.integers(2, 512),  # at OSL 1 predict has no TPOT (null), evaluate writes 0
    conc=st.sampled_from([1, 3, 16, 64]),
)
def test_any_row_the_calibration_path_reads_gets_the_same_answer_from_its_command(
    backend: str,
    model: str,
    system: str,
    tp: int,
    pp: int,
    formats: tuple[str, str, str],
    isl: int,
    osl: int,
    conc: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    precision, gemm, moe = formats
    cells = row(
        backend=backend,
        model_path=model,
        system=system,
        tp_size=str(tp),
        pp_size=str(pp),
        moe_tp_size=str(tp),
        precision=precision,
        gemm_quant_mode=gemm,
        moe_quant_mode=moe,
        isl=str(isl),
        osl=str(osl),
        silicon_data_source=f"x; silicon_concurrency={conc}",
    )
    spec = interpret(cells, MODELS)
    assert isinstance(spec, RowSpec), spec
    _same_answer(spec, capsys)


def test_format_pairs_map_to_one_flag_or_are_refused() -> None:
    assert weight_format_flag("", "") == []
    assert weight_format_flag("nvfp4", "nvfp4") == ["--weight-format", "nvfp4"]
    assert weight_format_flag("fp8", "fp8_block") == ["--weight-format", "fp8_block"]
    with pytest.raises(TokenmillError, match=r"gemm_quant_mode 'bf16' with moe_quant_mode 'nvfp4'"):
        weight_format_flag("bf16", "nvfp4")
    with pytest.raises(TokenmillError, match=r"gemm_quant_mode '\(empty\)' with moe_quant_mode 'fp8'"):
        weight_format_flag("", "fp8")


# --- tokenmill calibrate row -------------------------------------------------------------------


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture
def measurements(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "m.csv",
        [
            row(id="llama_h100_c8"),
            row(id="unknown_model", model_path="acme/Nothing-7B"),
            row(id="llama_h100_c4", silicon_data_source="x; silicon_concurrency=4"),
        ],
    )


def _row_cli(capsys: pytest.CaptureFixture[str], measurements: Path, *args: str) -> tuple[int, str, str]:
    return cli(capsys, "calibrate", "row", "--measurements", str(measurements), "--models-dir", str(MODELS), *args)


def _row_rows(capsys: pytest.CaptureFixture[str], measurements: Path, *ids: str) -> list[dict[str, Any]]:
    """``calibrate row --json``'s rows."""
    args = ("calibrate", "row", "--measurements", str(measurements), "--models-dir", str(MODELS), *ids, "--json")
    rows: list[dict[str, Any]] = cli_json(capsys, *args)["rows"]
    return rows


def test_calibrate_row_prints_measured_predicted_and_the_command(
    measurements: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _row_cli(capsys, measurements, "llama_h100_c8", "unknown_model")
    assert code == 0, err
    expected = predict_row(row(id="llama_h100_c8"), MODELS, load_table())
    first, second = out.split("\n\n")
    assert first.startswith("row llama_h100_c8\n") and "ISL 1,024 OSL 128 · 8 lanes" in first
    assert "60.00" in first and "7.00" in first and f"{expected.ttft_ms:,.2f}" in first
    assert f"{100 * (expected.ttft_ms / 60 - 1):+.1f}%" in first
    command = next(line.strip() for line in first.splitlines() if line.strip().startswith("tokenmill predict"))
    assert command.endswith("--concurrency 8")
    assert second.startswith("row unknown_model\n") and "not predicted: no config for model_path" in second


def test_calibrate_row_json_gives_a_command_that_reproduces_the_prediction(
    measurements: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (item,) = _row_rows(capsys, measurements, "llama_h100_c4")
    assert item["id"] == "llama_h100_c4" and item["concurrency"] == 4 and item["measured_ttft_ms"] == 60
    argv = shlex.split(item["predict_command"])
    assert argv == item["predict_argv"] and argv[:2] == ["tokenmill", "predict"]
    again = cli_json(capsys, *argv[1:], "--json")
    assert again["ttft_ms"] == pytest.approx(item["predicted_ttft_ms"], rel=1e-4)
    assert again["tpot_ms"] == pytest.approx(item["predicted_tpot_ms"], rel=1e-4)
    assert item["ttft_error"] == pytest.approx(item["predicted_ttft_ms"] / 60 - 1)


def test_calibrate_row_takes_patterns_in_the_files_order_each_row_once(
    measurements: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _row_rows(capsys, measurements, "llama_h100_c4", "llama_*")
    assert [r["id"] for r in rows] == ["llama_h100_c8", "llama_h100_c4"]


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["llama_h100_c9"], "no row has the id 'llama_h100_c9'; closest: llama_h100_c8, llama_h100_c4"),
        (["qwen_*"], "no row has the id 'qwen_*'"),
    ],
)
def test_calibrate_row_refuses_an_id_no_row_has(
    ids: list[str], message: str, measurements: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _row_cli(capsys, measurements, *ids)
    assert code == 2 and out == ""
    assert err == f"error: --measurements {measurements}: {message}\n"


def test_calibrate_row_refuses_more_rows_than_it_shows(
    measurements: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibrate_row_cmd, "MAX_ROWS", 2)
    code, out, err = _row_cli(capsys, measurements, "*")
    assert code == 2 and out == ""
    assert err == "error: 3 rows match; `calibrate row` shows at most 2 (`calibrate evaluate` predicts a whole file)\n"


def test_calibrate_row_needs_a_models_dir(
    measurements: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "calibrate", "row", "--measurements", str(measurements), "--models-dir", str(tmp_path / "no"), "x"
    )
    assert code == 2 and out == "" and err == f"error: --models-dir: no such directory {tmp_path / 'no'}\n"


def test_calibrate_row_predicts_a_file_without_measurements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = {k: v for k, v in row(id="planned").items() if not k.startswith("silicon_ttft") and k != "silicon_tpot_ms"}
    plain = _write(tmp_path / "plain.csv", [cells])
    (item,) = _row_rows(capsys, plain, "planned")
    assert item["measured_ttft_ms"] is None and item["ttft_error"] is None and item["predicted_ttft_ms"] > 0
    code, out, err = _row_cli(capsys, plain, "planned")
    assert code == 0, err
    ttft_line = next(line for line in out.splitlines() if line.strip().startswith("TTFT ms"))
    assert ttft_line.split("│")[1].strip() == "—" and ttft_line.split("│")[3].strip() == "—"


def test_calibrate_row_with_set_predicts_the_what_if_and_its_command_carries_it(
    measurements: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fitted,) = _row_rows(capsys, measurements, "llama_h100_c8")
    (slow,) = _row_rows(capsys, measurements, "llama_h100_c8", "--set", "compute_scale=0.5")
    assert slow["predicted_ttft_ms"] > fitted["predicted_ttft_ms"]
    params, _ = load_table().resolve("h100", "vllm")
    assert f"compute_scale {params.compute_scale:.4g} → 0.5" in " ".join(slow["notes"])
    argv = slow["predict_argv"]
    assert argv[-2:] == ["--set", "compute_scale=0.5"]
    again = cli_json(capsys, *argv[1:], "--json")
    assert again["ttft_ms"] == pytest.approx(slow["predicted_ttft_ms"], rel=1e-4)
    code, out, err = _row_cli(capsys, measurements, "llama_h100_c8", "--set", "compute_scale=5")
    assert code == 2 and out == "" and err == "error: --set compute_scale must be between 0.3 and 3 (got 5)\n"


# --- the parsers of the ids and the --by columns, on any text --------------------------------

_IDS = ["llama_h100_c8", "llama_h100_c4", "ds_b200_c16", "ds[v3]_c4"]
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)


@example(wanted=["ds[v3]_c4"])  # an id with brackets, named exactly: found, not read as a pattern
@given(wanted=st.lists(st.one_of(st.sampled_from(_IDS), _TEXT, _TEXT.map(lambda t: t + "*")), min_size=1, max_size=4))
def test_any_ids_select_rows_in_the_files_order_or_name_the_first_that_matches_none(wanted: list[str]) -> None:
    rows = [{"id": i} for i in _IDS]
    try:
        chosen = calibrate_row_cmd.select_rows(rows, wanted, "--measurements m.csv")
    except TokenmillError as exc:
        message = str(exc)
        assert message.startswith("--measurements m.csv: no row has the id ") and "\n" not in message
        assert not all(w.strip() in _IDS for w in wanted)  # ids named exactly are always found
        return
    ids = [r["id"] for r in chosen]
    assert ids == [i for i in _IDS if i in ids]  # the file's order, each once
    for item in wanted:  # every name matched something
        name = item.strip()
        assert any(fnmatch.fnmatch(i, name) for i in ids) or name in ids


#: A file's columns for the parsers below ("_malformed" is the reader's mark, not a column).
_COLUMNS = ["id", "backend", "isl", "osl", "mode", "_malformed"]


def _parsed(parse: Any, items: list[str], flag: str) -> Any:
    """What ``parse`` makes of ``items`` over ``_COLUMNS``, or None after checking that its error is
    one line naming ``flag``."""
    try:
        return parse(items, _COLUMNS)
    except TokenmillError as exc:
        assert str(exc).startswith(flag) and "\n" not in str(exc)
        return None


@given(
    items=st.lists(
        st.one_of(_TEXT, st.sampled_from(["backend", "isl,osl", "concurrency", "backend, mode"])), max_size=3
    )
)
def test_any_by_columns_are_the_files_columns_or_a_one_line_error(items: list[str]) -> None:
    from tokenmill.cli.calibrate_cmd import CONCURRENCY_COLUMN, by_columns

    groups = _parsed(by_columns, items, "--by")
    if groups is None:
        return
    assert len(groups) == len(items)
    for cols in groups:
        assert cols and all(c in _COLUMNS[:-1] or c == CONCURRENCY_COLUMN for c in cols)


@given(
    items=st.lists(st.one_of(_TEXT, st.sampled_from(["backend=vllm", "isl=1*", "concurrency=8", "mode"])), max_size=3)
)
def test_any_where_filters_are_a_column_and_a_pattern_or_a_one_line_error(items: list[str]) -> None:
    from tokenmill.cli.calibrate_cmd import CONCURRENCY_COLUMN, row_matches, where_filters

    filters = _parsed(where_filters, items, "--where")
    if filters is None:
        return
    assert len(filters) == len(items)
    assert all(col in _COLUMNS[:-1] or col == CONCURRENCY_COLUMN for col, _ in filters)
    row = {"id": "r", "backend": "vllm", "isl": "1024", "osl": "128", "mode": "agg", "silicon_data_source": "x"}
    assert row_matches(row, [f for f in filters if f == ("backend", "vllm")])  # its own cell matches
    row_matches(row, filters)  # any pattern is a pattern: it matches or not, it does not raise
