"""Weight storage: exact byte rules per format, and which tensors each published checkpoint stores
in which format (read from ``quantization_config``). Expected bytes are worked out by hand."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.spec import PRESETS, TensorKind, WeightFormat, load_model, model_from_config, tensor_bytes
from tokenmill.spec.formats import Storage

FIXTURES = Path(__file__).parent / "fixtures"
QWEN3_NEXT = FIXTURES / "qwen3_next_80b_a3b_config.json"

MXFP4 = Storage(WeightFormat.MXFP4)
NVFP4 = Storage(WeightFormat.NVFP4)
FP8_BLOCK = Storage(WeightFormat.FP8, (128, 128))
FP8_ROW = Storage(WeightFormat.FP8, None)
BF16 = Storage(WeightFormat.BF16)
FP16 = Storage(WeightFormat.FP16)
FP32 = Storage(WeightFormat.FP32)


def _preset_config(name: str) -> dict[str, Any]:
    text = (resources.files("tokenmill.spec") / "presets" / PRESETS[name].file).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


# --- byte rules ----------------------------------------------------------------------------


def test_mxfp4_is_17_bytes_per_32_params() -> None:
    # 4096 · 4096 = 16,777,216 params; 32 E2M1 values (16 B) + one E8M0 scale (1 B) per block.
    assert tensor_bytes((4096, 4096), MXFP4) == 4096 * 4096 * 17 // 32 == 8_912_896


def test_nvfp4_is_9_bytes_per_16_params() -> None:
    # 16 E2M1 values (8 B) + one E4M3 scale (1 B) per block.
    assert tensor_bytes((4096, 4096), NVFP4) == 4096 * 4096 * 9 // 16 == 9_437_184


def test_fp8_block_scales_add_4_bytes_per_128x128_block() -> None:
    # 4096/128 = 32 blocks each way → 1024 fp32 scales.
    assert tensor_bytes((4096, 4096), FP8_BLOCK) == 16_777_216 + 32 * 32 * 4 == 16_781_312


def test_fp8_block_scales_round_partial_blocks_up() -> None:
    # (100, 300): 30,000 B of data; ceil(100/128) = 1 × ceil(300/128) = 3 blocks → 12 B of scales.
    assert tensor_bytes((100, 300), FP8_BLOCK) == 30_000 + 1 * 3 * 4 == 30_012
    # (129, 257): ceil → 2 × 3 blocks.
    assert tensor_bytes((129, 257), FP8_BLOCK) == 129 * 257 + 2 * 3 * 4


def test_fp8_without_block_has_one_scale_per_row() -> None:
    assert tensor_bytes((100, 300), FP8_ROW) == 30_000 + 100 * 4


def test_16_and_32_bit() -> None:
    assert tensor_bytes((4096, 4096), BF16) == 2 * 16_777_216
    assert tensor_bytes((4096, 4096), FP16) == 2 * 16_777_216
    assert tensor_bytes((7,), FP32) == 28


def test_fp4_partial_blocks_round_up_per_row() -> None:
    # 10 rows × ceil(33/32) = 2 MX blocks × 17 B; 10 rows × ceil(17/16) = 2 NV blocks × 9 B.
    assert tensor_bytes((10, 33), MXFP4) == 10 * 2 * 17
    assert tensor_bytes((10, 17), NVFP4) == 10 * 2 * 9


def test_leading_dims_multiply_into_rows() -> None:
    # (2, 3, 64): 6 rows of 64 → 6 × 2 MX blocks × 17 B.
    assert tensor_bytes((2, 3, 64), MXFP4) == 6 * 2 * 17
    assert tensor_bytes((2, 3, 64), BF16) == 2 * 384


def test_empty_shape_rejected() -> None:
    with pytest.raises(ValueError):
        tensor_bytes((), BF16)


@given(rows=st.integers(1, 8192), blocks=st.integers(1, 512))
def test_mxfp4_bytes_times_32_equals_params_times_17(rows: int, blocks: int) -> None:
    cols = 32 * blocks
    assert tensor_bytes((rows, cols), MXFP4) * 32 == rows * cols * 17


@given(rows=st.integers(1, 8192), blocks=st.integers(1, 512))
def test_nvfp4_bytes_times_16_equals_params_times_9(rows: int, blocks: int) -> None:
    cols = 16 * blocks
    assert tensor_bytes((rows, cols), NVFP4) * 16 == rows * cols * 9


@given(rows=st.integers(1, 5000), cols=st.integers(1, 5000))
def test_fp8_block_bytes_bounds(rows: int, cols: int) -> None:
    n = tensor_bytes((rows, cols), FP8_BLOCK)
    scales = -(-rows // 128) * -(-cols // 128)
    assert n == rows * cols + 4 * scales
    assert rows * cols < n <= rows * cols + 4 * (rows * cols)


def test_weight_format_parse_aliases() -> None:
    assert WeightFormat.parse("MXFP4") is WeightFormat.MXFP4
    assert WeightFormat.parse("bfloat16") is WeightFormat.BF16
    assert WeightFormat.parse("fp8_e4m3") is WeightFormat.FP8


def test_weight_format_parse_rejects_int3_with_allowed_list() -> None:
    with pytest.raises(TokenmillError) as exc:
        WeightFormat.parse("int3")
    msg = str(exc.value)
    assert "\n" not in msg
    assert "int3" in msg
    assert "--expert-format" in msg
    for name in ("bf16", "fp16", "fp32", "fp8", "mxfp4", "nvfp4"):
        assert name in msg


# --- which tensors each checkpoint quantizes -------------------------------------------------


def test_kimi_k3_experts_mxfp4_everything_else_16_bit() -> None:
    """compressed-tensors mxfp4-pack-quantized; the ignore list keeps self_attn, shared experts,
    the dense MLP, lm_head and the vision tower in 16 bits."""
    m = load_model("kimi-k3")
    experts = [t for t in m.tensors if t.kind is TensorKind.ROUTED_EXPERTS]
    assert experts and all(t.storage.fmt is WeightFormat.MXFP4 for t in experts)
    for t in m.tensors:
        if t.kind is TensorKind.ROUTED_EXPERTS:
            continue
        if t.linear:
            assert t.storage.fmt is WeightFormat.BF16, t.name
        else:  # norms, embedding, router, conv, biases: 16-bit; KDA's A_log/dt_bias kept fp32
            expected = WeightFormat.FP32 if t.name.endswith(("A_log", "dt_bias")) else WeightFormat.BF16
            assert t.storage.fmt is expected, t.name
    # 92 layers × 896 experts × (gate + up: 3072 × 3584, down: 3584 × 3072), 17 B per 32 params:
    # per expert 3 × 3072 × 3584 = 33,030,144 params → 33,030,144 / 32 × 17 = 17,547,264 B.
    assert m.kind_bytes(TensorKind.ROUTED_EXPERTS) == 92 * 896 * 17_547_264


def test_deepseek_v3_fp8_linears_bf16_embedding_head_router() -> None:
    m = load_model("deepseek-v3")
    fp8_kinds = {TensorKind.ATTENTION_MLA, TensorKind.DENSE_MLP, TensorKind.SHARED_EXPERTS, TensorKind.ROUTED_EXPERTS}
    for t in m.tensors:
        if t.kind in fp8_kinds and t.linear:
            assert t.storage == Storage(WeightFormat.FP8, (128, 128)), t.name
        elif t.kind in (TensorKind.EMBEDDING, TensorKind.LM_HEAD, TensorKind.ROUTER, TensorKind.NORMS):
            assert t.storage.fmt is WeightFormat.BF16, t.name
        else:
            assert not t.linear, t.name  # only layernorm vectors inside attention are left
            assert t.storage.fmt is WeightFormat.BF16, t.name
    # Routed experts: 58 MoE layers × 256 experts × 3 matrices of 2048 × 7168 (or 7168 × 2048):
    # each 14,680,064 B of fp8 plus ceil(2048/128) · ceil(7168/128) = 16 · 56 scales × 4 B.
    assert m.kind_bytes(TensorKind.ROUTED_EXPERTS) == 58 * 256 * 3 * (2048 * 7168 + 16 * 56 * 4)
    # Embedding and lm_head: 129280 × 7168 × 2 B each.
    assert m.kind_bytes(TensorKind.EMBEDDING) == m.kind_bytes(TensorKind.LM_HEAD) == 129280 * 7168 * 2
    # Router: 58 × 256 × 7168 × 2 B (e_score_correction_bias is not in the inventory).
    assert m.kind_bytes(TensorKind.ROUTER) == 58 * 256 * 7168 * 2


def test_gpt_oss_experts_mxfp4_attention_bf16() -> None:
    m = load_model("gpt-oss-120b")
    for t in m.tensors:
        if t.kind is TensorKind.ROUTED_EXPERTS and t.linear:
            assert t.storage.fmt is WeightFormat.MXFP4, t.name
        else:  # modules_to_not_convert: self_attn, router, embed_tokens, lm_head; biases/norms unquantized
            assert t.storage.fmt is WeightFormat.BF16, t.name
    attention = [t for t in m.tensors if t.kind is TensorKind.ATTENTION_GQA]
    assert attention and all(t.storage.fmt is WeightFormat.BF16 for t in attention)
    # Expert linears: gate_up (2·2880 = 5760) × 2880 and down 2880 × 2880; 2880/32 = 90 MX blocks per row.
    # Per expert (5760 + 2880) × 90 × 17 = 13,219,200 B; × 128 experts × 36 layers.
    linear_expert_bytes = sum(t.bytes for t in m.tensors if t.kind is TensorKind.ROUTED_EXPERTS and t.linear)
    assert linear_expert_bytes == 36 * 128 * (5760 + 2880) * 90 * 17


def test_qwen3_235b_fp8_experts_fp8_and_bf16_variant_all_bf16() -> None:
    fp8 = load_model("qwen3-235b-a22b-fp8")
    bf16 = load_model("qwen3-235b-a22b")
    experts = [t for t in fp8.tensors if t.kind is TensorKind.ROUTED_EXPERTS]
    assert experts and all(t.storage == Storage(WeightFormat.FP8, (128, 128)) for t in experts)
    assert all(t.storage.fmt is WeightFormat.BF16 for t in bf16.tensors)
    assert fp8.kind_bytes(TensorKind.LM_HEAD) == bf16.kind_bytes(TensorKind.LM_HEAD) == 151936 * 4096 * 2
    assert fp8.total_params == bf16.total_params
    # BF16: 2 B per parameter exactly.
    assert bf16.checkpoint_bytes == 2 * bf16.total_params
    # FP8: ~1 B per linear parameter; embedding + lm_head (2 × 151936 × 4096 ≈ 1.24 B params) stay
    # 16-bit, so the checkpoint is a little over half: ≈ (235.1 + 1.3) / 470.2 ≈ 0.503.
    ratio = fp8.checkpoint_bytes / bf16.checkpoint_bytes
    assert 0.50 < ratio < 0.51


def test_minimax_not_convert_list_keeps_router_and_head_bf16() -> None:
    m = load_model("minimax-m2.5")
    experts = [t for t in m.tensors if t.kind is TensorKind.ROUTED_EXPERTS]
    assert all(t.storage == Storage(WeightFormat.FP8, (128, 128)) for t in experts)
    for kind in (TensorKind.ROUTER, TensorKind.LM_HEAD, TensorKind.EMBEDDING):
        assert all(t.storage.fmt is WeightFormat.BF16 for t in m.tensors if t.kind is kind)


# --- --expert-format override --------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["nvfp4", WeightFormat.NVFP4])
def test_expert_format_override_changes_only_routed_experts(fmt: str | WeightFormat) -> None:
    base = load_model("kimi-k3")
    over = load_model("kimi-k3", expert_format=fmt)
    assert len(base.tensors) == len(over.tensors)
    for a, b in zip(base.tensors, over.tensors, strict=True):
        assert (a.name, a.shape, a.kind) == (b.name, b.shape, b.kind)
        if a.kind is TensorKind.ROUTED_EXPERTS and a.linear:
            assert b.storage.fmt is WeightFormat.NVFP4
        else:
            assert a.storage == b.storage, a.name
    # Per expert 33,030,144 params × 9/16 = 18,579,456 B (vs 17,547,264 B in MXFP4).
    assert over.kind_bytes(TensorKind.ROUTED_EXPERTS) == 92 * 896 * 18_579_456
    delta = over.checkpoint_bytes - base.checkpoint_bytes
    assert delta == 92 * 896 * (18_579_456 - 17_547_264)
    assert any("nvfp4" in note for note in over.notes)


def test_expert_format_override_fp8_uses_128_blocks_on_bf16_model() -> None:
    base = load_model("qwen3-30b-a3b")
    over = load_model("qwen3-30b-a3b", expert_format="fp8")
    experts = [t for t in over.tensors if t.kind is TensorKind.ROUTED_EXPERTS]
    assert all(t.storage == Storage(WeightFormat.FP8, (128, 128)) for t in experts)
    # 48 layers × 128 experts × 3 × (768 × 2048): 1 B each plus ceil(768/128)·ceil(2048/128) = 6·16 scales.
    assert over.kind_bytes(TensorKind.ROUTED_EXPERTS) == 48 * 128 * 3 * (768 * 2048 + 6 * 16 * 4)
    others_base = [t.bytes for t in base.tensors if t.kind is not TensorKind.ROUTED_EXPERTS]
    others_over = [t.bytes for t in over.tensors if t.kind is not TensorKind.ROUTED_EXPERTS]
    assert others_base == others_over


def test_expert_format_override_rejects_unknown_name() -> None:
    with pytest.raises(TokenmillError, match="int3"):
        load_model("kimi-k3", expert_format="int3")


# --- unsupported quantization configs ------------------------------------------------------


def _qwen_next_with(qc: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(QWEN3_NEXT.read_text())
    config["quantization_config"] = qc
    return config


def test_unsupported_quant_method_names_it() -> None:
    with pytest.raises(TokenmillError) as exc:
        model_from_config(_qwen_next_with({"quant_method": "gptq", "bits": 4}), "q")
    msg = str(exc.value)
    assert "gptq" in msg
    assert "quant_method" in msg
    assert "\n" not in msg


def test_unsupported_compressed_tensors_format_names_it() -> None:
    qc = {"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {}}
    with pytest.raises(TokenmillError, match="int-quantized"):
        model_from_config(_qwen_next_with(qc), "q")


def test_unsupported_modelopt_algo_names_it() -> None:
    with pytest.raises(TokenmillError, match="W4A8"):
        model_from_config(_qwen_next_with({"quant_method": "modelopt", "quant_algo": "W4A8"}), "q")


def test_bad_weight_block_size() -> None:
    with pytest.raises(TokenmillError, match="weight_block_size"):
        model_from_config(_qwen_next_with({"quant_method": "fp8", "weight_block_size": [128]}), "q")


def test_quantization_config_must_be_object() -> None:
    with pytest.raises(TokenmillError, match="quantization_config"):
        model_from_config(_qwen_next_with("fp8"), "q")


def test_compressed_tensors_nvfp4_with_regex_ignore() -> None:
    """A ModelOpt-style NVFP4 export of Qwen3-Next: experts NVFP4, attention ignored by regex."""
    qc = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "ignore": ["lm_head", "re:.*linear_attn.*", "re:.*self_attn.*", "re:.*shared_expert.*"],
    }
    m = model_from_config(_qwen_next_with(qc), "q")
    for t in m.tensors:
        if t.kind is TensorKind.ROUTED_EXPERTS:
            assert t.storage.fmt is WeightFormat.NVFP4, t.name
        elif t.kind is TensorKind.ATTENTION_GDN and t.name.endswith("A_log"):
            assert t.storage.fmt is WeightFormat.FP32
        else:
            assert t.storage.fmt is WeightFormat.BF16, t.name
    # 48 × 512 experts × 3 × 512 × 2048 params × 9/16.
    assert m.kind_bytes(TensorKind.ROUTED_EXPERTS) == 48 * 512 * 3 * 512 * 2048 * 9 // 16


def test_quantization_config_inside_text_config_is_used() -> None:
    """K3 keeps quantization_config inside text_config; the loader must find it there."""
    config = _preset_config("kimi-k3")
    assert "quantization_config" not in config
    assert "quantization_config" in config["text_config"]
    m = model_from_config(config, "k3")
    assert {t.storage.fmt for t in m.tensors if t.kind is TensorKind.ROUTED_EXPERTS} == {WeightFormat.MXFP4}


@pytest.mark.parametrize("value", [1, True, 1.5, "lm_head", {"a": 1}, ["lm_head", 3]])
def test_a_module_list_that_is_not_a_list_of_names_is_one_error(value: object) -> None:
    """Found by fuzzing: a number there was iterated and raised a TypeError traceback."""
    config = _preset_config("qwen3-235b-a22b-fp8")
    config["quantization_config"]["modules_to_not_convert"] = value
    with pytest.raises(
        TokenmillError, match=r"quantization_config\.modules_to_not_convert must be a list of module names"
    ):
        model_from_config(config, "q", "q.json")


def test_a_model_type_that_is_not_a_string_is_one_error() -> None:
    config = _preset_config("kimi-k3")
    config["text_config"]["model_type"] = []
    with pytest.raises(TokenmillError, match=r"unknown model_type \[\]"):
        model_from_config(config, "k3", "k3.json")


def test_a_vision_tower_of_a_trillion_layers_is_refused_not_built() -> None:
    config = _preset_config("kimi-k3")
    config["vision_config"]["vt_num_hidden_layers"] = 10**12
    with pytest.raises(TokenmillError, match=r"'vt_num_hidden_layers' must be at most 10,000"):
        model_from_config(config, "k3", "k3.json")
