"""Reading measurement rows: names, layouts, repairs, and a reason for every row that cannot be read."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.perf.rows import MODELS, row
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.measurements import RowSpec, Skip, find_config, interpret, model_for_row, read_measurements
from tokenmill.perf.replay import MAX_CONCURRENCY
from tokenmill.perf.row_prediction import predict_row
from tokenmill.perf.scoring import score
from tokenmill.spec.tensors import TensorKind


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


def test_batch_size_per_gpu_or_several_workers_behind_one_benchmark() -> None:
    """batch_size is per worker where it agrees with silicon_concurrency; some TRT-LLM rows give it
    per GPU (concurrency = batch_size × the worker's GPUs: one worker, the benchmark's lanes); any
    other excess means workers the file does not count (the Qwen3-32B-NVFP4 rows: 416 = 13 × 32
    on TP 2) and the row is skipped with that reason."""
    per_gpu = interpret(row(silicon_data_source="x; silicon_concurrency=80", batch_size="10", tp_size="8"), MODELS)
    assert isinstance(per_gpu, RowSpec) and per_gpu.concurrency == 80
    assert any("batch_size is per GPU" in n for n in per_gpu.notes)
    many = interpret(row(silicon_data_source="x; silicon_concurrency=416", batch_size="13", tp_size="2"), MODELS)
    assert isinstance(many, Skip)
    assert many.reason == (
        "silicon_concurrency=416 is neither batch_size × attention DP (13) nor batch_size × the worker's "
        "2 GPUs (26): how many workers shared the benchmark is not recorded"
    )
    # batch_size × DP above the benchmark's concurrency: the benchmark's stands
    wide = interpret(
        row(
            model_path="MiniMaxAI/MiniMax-M2.5",
            tp_size="1",
            attention_dp_size="8",
            moe_ep_size="8",
            batch_size="32",
            silicon_data_source="x; silicon_concurrency=32",
        ),
        MODELS,
    )
    assert isinstance(wide, RowSpec) and wide.concurrency == 32
    same = interpret(row(silicon_data_source="x; silicon_concurrency=8", batch_size="8"), MODELS)
    assert isinstance(same, RowSpec) and same.concurrency == 8 and not any("per GPU" in n for n in same.notes)


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
    unknown = interpret(row(model_path="acme/Unknown-7B"), MODELS)
    assert isinstance(unknown, Skip)
    assert unknown.reason == "no config for model_path 'acme/Unknown-7B' in the models dir"
    empty = interpret(row(model_path=" "), MODELS)
    assert isinstance(empty, Skip) and empty.reason == "model_path missing"
    assert "unknown system" in interpret(row(system="tpu_v9"), MODELS).reason  # type: ignore[union-attr]


def test_disaggregated_rows_without_batch_sizes_are_predicted_under_an_assumption() -> None:
    r = row(mode="disagg", tp_size="", moe_tp_size="", moe_ep_size="", batch_size="", model_path="Qwen/Qwen3-32B")
    r.update({"prefill_tp_size": "2", "decode_tp_size": "2", "prefill_pp_size": "1", "decode_pp_size": "1"})
    spec = interpret(r, MODELS)
    assert isinstance(spec, RowSpec) and not spec.fully_specified
    assert spec.prefill is not None and spec.decode is not None and spec.gpus == 4
    assert any("assumed" in n for n in spec.notes)


# --- malformed cells: a reason naming the column, never an exception ---------------------------

NUMERIC = ("isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size")
LAYOUT = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size")


def cells() -> st.SearchStrategy[str]:
    """What a hand-edited or foreign CSV may hold where a number belongs."""
    return st.one_of(
        st.sampled_from(["", "0", "-1", "1.5", "inf", "-inf", "nan", "1e400", "1e9", " 8 ", "8.0", "eight"]),
        st.integers(min_value=-(10**12), max_value=10**12).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(alphabet=string.printable, max_size=12),
    )


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from((*NUMERIC, "silicon_ttft_ms", "silicon_tpot_ms")), cells(), min_size=1))
def test_any_numeric_cell_gives_a_spec_or_a_one_line_reason(cells_by_column: dict[str, str]) -> None:
    got = interpret(row(**cells_by_column), MODELS)
    assert isinstance(got, RowSpec | Skip)
    if isinstance(got, Skip):
        assert got.reason and "\n" not in got.reason
    else:
        assert got.isl >= 1 and got.osl >= 1 and got.concurrency >= 1
        for measured in (got.ttft_ms, got.tpot_ms):
            assert measured is None or 0 < measured < float("inf")


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.sampled_from(LAYOUT), cells(), min_size=1))
def test_any_layout_cell_is_predicted_or_skipped_with_a_reason(cells_by_column: dict[str, str]) -> None:
    pred = predict_row(row(**cells_by_column), str(MODELS), load_table())
    assert (pred.ttft_ms is None) == bool(pred.skipped_reason)
    assert not pred.skipped_reason.startswith("internal error"), pred.skipped_reason


def test_unreadable_lengths_name_the_column_and_the_value() -> None:
    for value in ("inf", "1e400", "-5", "0", "abc", "1024.5", "0.5"):
        got = interpret(row(isl=value), MODELS)
        assert isinstance(got, Skip) and got.reason == f"isl {value!r} is not a positive integer"
    whole = interpret(row(isl="1024.0", osl="128"), MODELS)  # a whole number written as a float
    assert isinstance(whole, RowSpec) and whole.isl == 1024
    missing = interpret(row(osl=""), MODELS)
    assert isinstance(missing, Skip) and missing.reason == "osl missing"


def test_unreadable_sizes_are_skipped_not_read_as_one() -> None:
    # an empty or 0 size means 1 (the collector's convention); text, fractions, inf do not
    assert isinstance(interpret(row(tp_size="", moe_tp_size="0", moe_ep_size="0"), MODELS), RowSpec)
    for value in ("inf", "2.5", "two", "-2"):
        got = interpret(row(tp_size=value), MODELS)
        assert isinstance(got, Skip) and got.reason.startswith(f"tp_size {value!r} is not a positive whole number")


def test_concurrency_zero_or_beyond_the_replay_is_skipped_with_a_reason() -> None:
    zero = interpret(row(silicon_data_source="x; silicon_concurrency=0"), MODELS)
    assert isinstance(zero, Skip) and "silicon_concurrency=0" in zero.reason
    huge = predict_row(
        row(silicon_data_source="x; silicon_concurrency=1000000000", batch_size=""), str(MODELS), load_table()
    )
    assert huge.ttft_ms is None
    assert huge.skipped_reason == f"concurrency must be between 1 and {MAX_CONCURRENCY:,} (got 1,000,000,000)"


def test_unknown_weight_formats_are_skipped_and_sixteen_bit_ones_drop_the_checkpoints_quantization() -> None:
    bad = interpret(row(gemm_quant_mode="int3"), MODELS)
    assert isinstance(bad, Skip) and bad.reason.startswith("unknown gemm_quant_mode 'int3' (known: bf16, fp16, fp8")
    spec = interpret(row(model_path="deepseek-ai/DeepSeek-R1", gemm_quant_mode="bf16", moe_quant_mode="bf16"), MODELS)
    assert isinstance(spec, RowSpec)
    config = str(spec.config_path)

    def expert_bytes_per_param(gemm: str, moe: str) -> float:
        model = model_for_row(config, gemm, moe)
        experts = [t for t in model.tensors if t.kind is TensorKind.ROUTED_EXPERTS]
        return sum(t.bytes for t in experts) / sum(t.params for t in experts)

    # DeepSeek-R1 ships FP8 weights with 128×128 block scales: ~1 byte per parameter; bf16 is 2
    assert 1.0 <= expert_bytes_per_param("", "") < 1.01
    assert expert_bytes_per_param("bf16", "bf16") == 2.0


def test_a_file_that_is_not_utf8_text_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(b"id,backend\n\xdd\xff\xfe")
    with pytest.raises(TokenmillError, match=r"^--measurements .*m\.csv: not a UTF-8 CSV file \(byte 11\)$"):
        read_measurements(path)


def test_an_empty_or_repeated_id_refuses_the_file_naming_the_lines(tmp_path: Path) -> None:
    # predictions are written by id: two rows of one id, or a row without one, could not be told apart
    head = "id,backend,model_path,system,mode,isl,osl,batch_size\n"
    good = "vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,agg,1024,128,4\n"
    path = tmp_path / "m.csv"
    path.write_text(head + f"r1,{good}r2,{good}r1,{good}")
    repeated = r"^--measurements .*m\.csv: line 4: id 'r1' repeats line 2 \(ids must be unique\)$"
    with pytest.raises(TokenmillError, match=repeated):
        read_measurements(path)
    path.write_text(head + f"r1,{good} ,{good}")
    with pytest.raises(TokenmillError, match=r"^--measurements .*m\.csv: line 3: the id is empty"):
        read_measurements(path)
    # a quoted cell with a line break: the line named is where the row ends, as the reader counts
    path.write_text(head + f'r1,{good}"r\n2",{good}"r\n2",{good}')
    with pytest.raises(TokenmillError, match=r"line 6: id 'r\\n2' repeats line 4 \(ids"):  # one line: the id as repr
        read_measurements(path)


def test_lines_with_more_or_fewer_fields_than_the_header_are_skipped_with_the_count(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    good = "r3,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,agg,1024,128,4"
    path.write_text(
        "id,backend,model_path,system,mode,isl,osl,batch_size\n"
        "r1,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,agg,1024,128,4,extra\n"
        f"r2,vllm\n{good}\n"
    )
    rows, silicon = read_measurements(path)
    assert not silicon
    got = [interpret(r, MODELS) for r in rows]
    assert [g.reason for g in got[:2]] == [  # type: ignore[union-attr]
        "malformed line: 9 fields where the header has 8",
        "malformed line: 2 fields where the header has 8",
    ]
    assert isinstance(got[2], RowSpec) and got[2].concurrency == 4
    # the scores group the short line's missing model and system under a name that sorts and prints
    scored = score([predict_row(r, str(MODELS), load_table()) for r in rows])
    assert sorted(scored["by_model"]) == ["(empty)", "meta-llama/Llama-3.1-8B-Instruct"]
    assert scored["by_system"]["(empty)"]["rows"] == 1


def test_an_unknown_precision_is_skipped_and_the_known_ones_set_the_cache() -> None:
    bad = interpret(row(precision="fp2"), MODELS)
    assert isinstance(bad, Skip)
    assert bad.reason == "unknown precision 'fp2' (known: bf16, fp16, fp8, fp4, nvfp4, mxfp4, or empty)"
    for precision, fp8_cache in (("", False), ("BF16", False), ("fp8", True), ("fp4", True), ("NVFP4", True)):
        spec = interpret(row(precision=precision), MODELS)
        assert isinstance(spec, RowSpec) and spec.agg is not None
        assert (spec.agg.layout.kv_cache_dtype.value == "fp8_e4m3") is fp8_cache, precision


def test_a_measured_value_that_is_not_a_positive_number_is_unscored_and_noted() -> None:
    spec = interpret(row(silicon_ttft_ms="fast", silicon_tpot_ms="-3"), MODELS)
    assert isinstance(spec, RowSpec) and spec.ttft_ms is None and spec.tpot_ms is None
    assert "silicon_ttft_ms 'fast' is not a positive number: not scored" in spec.notes
    assert "silicon_tpot_ms '-3' is not a positive number: not scored" in spec.notes
    clean = interpret(row(), MODELS)
    assert isinstance(clean, RowSpec) and not any("not scored" in n for n in clean.notes)


def test_a_byte_order_mark_and_quoted_line_breaks_are_read(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    text = (
        "id,backend,model_path,system,mode,isl,osl,batch_size,silicon_data_source\n"
        'r1,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,agg,1024,128,4,"run 7,\nsecond line"\n'
    )
    path.write_bytes(text.encode("utf-8-sig"))
    rows, _ = read_measurements(path)
    assert len(rows) == 1 and rows[0]["id"] == "r1"
    assert rows[0]["silicon_data_source"] == "run 7,\nsecond line"
    assert isinstance(interpret(rows[0], MODELS), RowSpec)


def test_a_broken_config_in_the_models_dir_is_a_skip_reason_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "meta-llama--Meta-Llama-3.1-8B_config.json").write_bytes(b"\x00\xff{")
    (tmp_path / "Qwen--Qwen3-32B_config.json").write_text('{"model_type": ')
    binary = predict_row(row(), str(tmp_path), load_table())
    assert binary.ttft_ms is None
    assert binary.skipped_reason.endswith("meta-llama--Meta-Llama-3.1-8B_config.json: not a UTF-8 JSON file (byte 1)")
    truncated = predict_row(row(model_path="Qwen/Qwen3-32B"), str(tmp_path), load_table())
    assert truncated.ttft_ms is None
    assert "Qwen--Qwen3-32B_config.json: not valid JSON (line 1: Expecting value)" in truncated.skipped_reason


def test_scores_by_weight_format_count_every_row_under_its_gemm_quant_mode() -> None:
    # a format the file does not know is still a row of that format, skipped: its coverage shows it
    cells = [
        {"id": "a"},
        {"id": "b", "precision": "fp8", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"},
        {"id": "c", "precision": "fp8", "gemm_quant_mode": "FP8_block"},
        {"id": "d", "precision": "fp4", "gemm_quant_mode": "nvfp4"},
        {"id": "e", "gemm_quant_mode": "int3"},
    ]
    preds = [predict_row(row(**c), str(MODELS), load_table()) for c in cells]
    by_format = score(preds)["by_format"]
    assert sorted(by_format) == ["checkpoint", "fp8", "fp8_block", "int3", "nvfp4"]
    assert [by_format[k]["rows"] for k in ("checkpoint", "fp8", "fp8_block", "nvfp4", "int3")] == [1, 1, 1, 1, 1]
    assert by_format["int3"]["predicted"] == 0 and by_format["nvfp4"]["predicted"] == 1
    # smaller weights stream faster: the same deployment decodes faster in each narrower format
    tpot = {p.id: p.tpot_ms or 0.0 for p in preds}
    assert tpot["a"] > tpot["b"] > tpot["d"]
