"""``--weight-format``: a checkpoint's linear weights sized in another format (``spec.requantize``).

Expected byte counts are worked by hand from Llama-3.1-70B's shapes (hidden 8,192, MLP 28,672,
64 query and 8 KV heads of 128, 80 layers): per layer q and o are 8,192 × 8,192, k and v
1,024 × 8,192, gate and up 28,672 × 8,192, down 8,192 × 28,672, that is 855,638,016 parameters over
83,968 output rows.
"""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from tests.perf.rows import MODELS
from tokenmill.errors import TokenmillError
from tokenmill.perf.measurements import model_for_row
from tokenmill.spec import load_model
from tokenmill.spec.formats import WeightFormat
from tokenmill.spec.model import ModelSpec
from tokenmill.spec.requantize import WEIGHT_FORMATS, parse_weight_format, requantize
from tokenmill.spec.tensors import TensorKind

LAYERS = 80
PARAMS_PER_LAYER = 855_638_016
ROWS_PER_LAYER = 83_968
BLOCKS_PER_LAYER = 2 * 64 * 64 + 2 * 8 * 64 + 3 * 224 * 64  # 128 × 128 blocks of the seven matrices
LAYER_KINDS = (TensorKind.ATTENTION_GQA, TensorKind.DENSE_MLP)


def _layer_bytes(model: ModelSpec) -> int:
    return sum(model.kind_bytes(kind) for kind in LAYER_KINDS)


def _other_bytes(model: ModelSpec) -> list[int]:
    return [t.bytes for t in model.tensors if t.kind not in LAYER_KINDS]


@pytest.mark.parametrize(
    ("fmt", "bytes_per_layer"),
    [
        ("bf16", 2 * PARAMS_PER_LAYER),
        ("fp8", PARAMS_PER_LAYER + 4 * ROWS_PER_LAYER),  # 1 B each and an fp32 scale per output row
        ("fp8_block", PARAMS_PER_LAYER + 4 * BLOCKS_PER_LAYER),  # an fp32 scale per 128 × 128 block
        ("nvfp4", PARAMS_PER_LAYER // 16 * 9),  # 16 values and their E4M3 scale in 9 B
    ],
)
def test_a_16_bit_checkpoint_sizes_its_layers_in_the_format_asked(fmt: str, bytes_per_layer: int) -> None:
    base = load_model("llama-3.1-70b")
    served = load_model("llama-3.1-70b", weight_format=fmt)
    assert _layer_bytes(base) == LAYERS * 2 * PARAMS_PER_LAYER
    assert _layer_bytes(served) == LAYERS * bytes_per_layer
    # embeddings, norms and lm_head stay 16-bit in every format
    assert _other_bytes(served) == _other_bytes(base)
    assert all(t.storage.fmt is WeightFormat.BF16 for t in served.tensors if t.kind is TensorKind.LM_HEAD)


def test_only_fp8_of_a_16_bit_checkpoint_is_quantized_at_load() -> None:
    assert load_model("llama-3.1-70b", weight_format="fp8").quantize_on_load == "fp8"
    for fmt in ("fp8_block", "nvfp4", "bf16"):
        model = load_model("llama-3.1-70b", weight_format=fmt)
        assert model.quantize_on_load is None, fmt
    assert load_model("llama-3.1-70b").quantize_on_load is None
    note = load_model("llama-3.1-70b", weight_format="nvfp4").requantized
    assert note is not None and "nvfp4" in note and "16-bit" in note


def test_a_checkpoint_already_at_that_width_is_kept_as_stored() -> None:
    stored = load_model("deepseek-v3")  # FP8 with 128 × 128 block scales
    for fmt in ("fp8", "fp8_block"):
        served = load_model("deepseek-v3", weight_format=fmt)
        assert served.tensors == stored.tensors, fmt
        assert served.quantize_on_load is None
        assert served.requantized is not None and "kept as stored" in served.requantized
    # gpt-oss stores its experts in MXFP4: asked for 4-bit weights it is served as it is
    assert load_model("gpt-oss-120b", weight_format="nvfp4").tensors == load_model("gpt-oss-120b").tensors


def test_bf16_undoes_the_checkpoints_quantization() -> None:
    served = load_model("deepseek-v3", weight_format="bf16")
    assert all(t.storage.fmt is WeightFormat.BF16 for t in served.tensors)
    assert served.requantized is not None and "8-bit" in served.requantized


def test_the_expert_format_still_sets_the_routed_experts() -> None:
    served = load_model("qwen3-30b-a3b", expert_format="nvfp4", weight_format="fp8")
    formats = {t.kind: t.storage.fmt for t in served.tensors if t.linear and t.kind is not TensorKind.LM_HEAD}
    assert formats[TensorKind.ROUTED_EXPERTS] is WeightFormat.NVFP4
    assert formats[TensorKind.ATTENTION_GQA] is WeightFormat.FP8


def test_no_format_changes_nothing() -> None:
    assert load_model("llama-3.1-70b", weight_format=None) == load_model("llama-3.1-70b")
    assert load_model("llama-3.1-70b").weight_format is None


def test_the_spec_keeps_the_format_asked_even_where_nothing_changed() -> None:
    # a deployment is named by it (predict --compare weight-format=…)
    same = load_model("llama-3.1-70b", weight_format="BF16")
    assert same.weight_format == "bf16" and same.requantized is None
    assert same.tensors == load_model("llama-3.1-70b").tensors


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("preset", ["llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b"])
def test_the_flag_and_a_calibration_rows_gemm_mode_size_a_model_alike(fmt: str, preset: str) -> None:
    # `predict --weight-format F` must hold the weights `calibrate evaluate` holds for a row of
    # gemm_quant_mode F, or the command that predicts a row would not reproduce it
    config = {
        "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B",
        "deepseek-v3": "deepseek-ai--DeepSeek-V3",
        "gpt-oss-120b": "openai--gpt-oss-120b",
        "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
    }[preset]
    row_model = model_for_row(str(MODELS / f"{config}_config.json"), fmt, "")
    assert row_model.tensors == load_model(preset, weight_format=fmt).tensors


def test_the_config_it_is_given_is_not_changed() -> None:
    text = (resources.files("tokenmill.spec") / "presets" / "deepseek-ai--DeepSeek-V3_config.json").read_text()
    config = json.loads(text)
    before = copy.deepcopy(config)
    for gemm, moe in (("bf16", ""), ("nvfp4", ""), ("", "nvfp4"), ("fp8", "fp8")):
        requantize(config, gemm, moe)
    assert config == before


@pytest.mark.parametrize("value", ["int4", "mxfp4", "", "fp8-block"])
def test_an_unknown_format_is_one_line_naming_the_flag_and_the_choices(value: str) -> None:
    with pytest.raises(TokenmillError, match=r"^--weight-format must be one of bf16\|fp16\|fp8\|fp8_block\|nvfp4"):
        parse_weight_format(value)
    with pytest.raises(TokenmillError, match="--weight-format"):
        load_model("llama-3.1-8b", weight_format=value)


def test_format_names_are_read_without_case_or_spaces() -> None:
    assert parse_weight_format(" FP8_Block ") == "fp8_block"
