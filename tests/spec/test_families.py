"""Family parsers: every preset's layer kinds counted by hand from its config.json, published
parameter totals, nested configs, the two Kimi-Linear schedule formats, Qwen3-Next, and the
one-line errors of the loader.

Expected values are written from the config numbers (arithmetic in the comments), never taken
from the code under test.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import cli_json
from tokenmill.errors import TokenmillError
from tokenmill.spec import (
    PRESETS,
    FfnKind,
    MixerKind,
    ModelSpec,
    TensorKind,
    load_model,
    model_from_config,
)

FIXTURES = Path(__file__).parent / "fixtures"
QWEN3_NEXT = FIXTURES / "qwen3_next_80b_a3b_config.json"
QWEN3_5_WRAPPER = FIXTURES / "qwen3_5_moe_wrapper_config.json"
KIMI_TINY_MOONSHOT = FIXTURES / "kimi_linear_tiny_moonshot_config.json"
KIMI_TINY_LAYER_TYPES = FIXTURES / "kimi_linear_tiny_layer_types_config.json"

B = 10**9


def _fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _preset_config(name: str) -> dict[str, Any]:
    """The bundled config.json of a preset, as shipped in the package."""
    text = (resources.files("tokenmill.spec") / "presets" / PRESETS[name].file).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _mixers(m: ModelSpec, kind: MixerKind) -> list[int]:
    return [layer.index for layer in m.layers if layer.mixer is kind]


def _ffns(m: ModelSpec, kind: FfnKind) -> list[int]:
    return [layer.index for layer in m.layers if layer.ffn is kind]


def _inventory(m: ModelSpec) -> list[tuple[Any, ...]]:
    """Everything that decides bytes, in a comparable form."""
    return sorted(
        (t.name, t.kind.value, t.shape, t.shard.value, t.storage.fmt.value, t.layers, t.copies, t.bytes)
        for t in m.tensors
    )


# --- every preset loads, with its layer kinds counted by hand ----------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads(name: str) -> None:
    m = load_model(name)
    assert m.name == name
    assert m.num_layers == len(m.layers) > 0
    assert [layer.index for layer in m.layers] == list(range(m.num_layers))
    assert m.total_params > m.active_params > 0
    assert m.checkpoint_bytes > 0
    assert m.hf_id == PRESETS[name].hf_id


# (preset, num_hidden_layers, {kind: count}) — counts read off each config.json.
LAYER_COUNTS = [
    # Llama-3.1-8B: 32 layers, all full GQA + dense MLP.
    ("llama-3.1-8b", 32, {"gqa": 32, "ffn_dense": 32}),
    # Llama-3.1-70B: 80 layers.
    ("llama-3.1-70b", 80, {"gqa": 80, "ffn_dense": 80}),
    # Qwen3-32B: 64 layers, dense.
    ("qwen3-32b", 64, {"gqa": 64, "ffn_dense": 64}),
    # Qwen3 MoE: decoder_sparse_step 1 and mlp_only_layers [] → every layer MoE.
    ("qwen3-235b-a22b", 94, {"gqa": 94, "ffn_moe": 94}),
    ("qwen3-235b-a22b-fp8", 94, {"gqa": 94, "ffn_moe": 94}),
    ("qwen3-30b-a3b", 48, {"gqa": 48, "ffn_moe": 48}),
    # gpt-oss-120b: layer_types alternates sliding/full over 36 layers → 18 + 18; every layer MoE.
    ("gpt-oss-120b", 36, {"swa": 18, "gqa": 18, "ffn_moe": 36}),
    # MiniMax-M2.5: 62 layers, all GQA + MoE.
    ("minimax-m2.5", 62, {"gqa": 62, "ffn_moe": 62}),
    # DeepSeek-V3/R1: 61 MLA layers, first_k_dense_replace 3 → 3 dense + 58 MoE.
    ("deepseek-v3", 61, {"mla": 61, "ffn_dense": 3, "ffn_moe": 58}),
    ("deepseek-r1", 61, {"mla": 61, "ffn_dense": 3, "ffn_moe": 58}),
    # Kimi-K2: 61 MLA layers, first_k_dense_replace 1 → 1 dense + 60 MoE.
    ("kimi-k2", 61, {"mla": 61, "ffn_dense": 1, "ffn_moe": 60}),
    # Kimi-K3: linear_attn_config lists 69 KDA and 24 full (MLA) layers; first_k_dense_replace 1.
    ("kimi-k3", 93, {"kda": 69, "mla": 24, "ffn_dense": 1, "ffn_moe": 92}),
    # Kimi-Linear-48B-A3B: layer_types holds 6 full_attention and 27 − 6 = 21 linear_attention;
    # mlp_layer_types is 1 dense + 26 sparse.
    ("kimi-linear-48b-a3b", 27, {"kda": 21, "mla": 6, "ffn_dense": 1, "ffn_moe": 26}),
    # kimi-linear-tiny (tokenmill's embedded default): layer_types KDA, KDA, KDA, MLA;
    # mlp_layer_types dense, sparse, sparse, sparse.
    ("kimi-linear-tiny", 4, {"kda": 3, "mla": 1, "ffn_dense": 1, "ffn_moe": 3}),
    # Nemotron-3-Nano: hybrid_override_pattern
    #   MEMEM* | EMEMEM* ×4 | EMEMEMEM* | EMEMEMEME
    #   M: 3 + 4·3 + 4 + 4 = 23;  E: 2 + 4·3 + 4 + 5 = 23;  *: 1 + 4 + 1 = 6;  6 + 28 + 9 + 9 = 52.
    ("nemotron-3-nano-30b-a3b", 52, {"mamba2": 23, "ffn_moe": 23, "gqa": 6}),
]


def test_layer_count_table_covers_every_preset() -> None:
    assert sorted(name for name, _, _ in LAYER_COUNTS) == sorted(PRESETS)


@pytest.mark.parametrize(("name", "n_layers", "counts"), LAYER_COUNTS, ids=[c[0] for c in LAYER_COUNTS])
def test_preset_layer_kinds_match_config(name: str, n_layers: int, counts: dict[str, int]) -> None:
    m = load_model(name)
    assert m.num_layers == n_layers
    assert m.layer_kind_counts() == counts


def test_gpt_oss_alternates_sliding_and_full() -> None:
    m = load_model("gpt-oss-120b")
    # layer_types starts with sliding_attention and alternates: even indices sliding, odd full.
    assert _mixers(m, MixerKind.SWA) == list(range(0, 36, 2))
    assert _mixers(m, MixerKind.GQA) == list(range(1, 36, 2))
    assert m.gqa is not None and m.gqa.sliding_window == 128
    assert _ffns(m, FfnKind.MOE) == list(range(36))


def test_nemotron_pattern_positions() -> None:
    m = load_model("nemotron-3-nano-30b-a3b")
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # copied from the config
    # The '*' positions, 0-based: 5, 12, 19, 26, 33, 42.
    assert _mixers(m, MixerKind.GQA) == [5, 12, 19, 26, 33, 42]
    assert _mixers(m, MixerKind.MAMBA2) == [i for i, c in enumerate(pattern) if c == "M"]
    assert _ffns(m, FfnKind.MOE) == [i for i, c in enumerate(pattern) if c == "E"]
    # A Nemotron-H block has a mixer or an FFN, never both.
    assert all((layer.mixer is None) != (layer.ffn is None) for layer in m.layers)
    assert m.family == "mamba_hybrid"


def test_kimi_k3_schedule_from_linear_attn_config() -> None:
    m = load_model("kimi-k3")
    # full_attn_layers (1-based) 4, 8, …, 92, 93 → 0-based 3, 7, …, 91 (23 layers) and 92.
    mla = [*range(3, 92, 4), 92]
    assert len(mla) == 24
    assert _mixers(m, MixerKind.MLA) == mla
    assert _mixers(m, MixerKind.KDA) == [i for i in range(93) if i not in mla]
    # first_k_dense_replace 1: layer 0 dense, layers 1..92 MoE.
    assert _ffns(m, FfnKind.DENSE) == [0]
    assert _ffns(m, FfnKind.MOE) == list(range(1, 93))
    assert m.family == "kda_mla_moe"


def test_kimi_linear_48b_schedule_from_layer_types() -> None:
    m = load_model("kimi-linear-48b-a3b")
    # The bundled file's layer_types has full_attention at 0-based 4, 8, 12, 16, 20, 24.
    assert _mixers(m, MixerKind.MLA) == [4, 8, 12, 16, 20, 24]
    assert len(_mixers(m, MixerKind.KDA)) == 21
    assert _ffns(m, FfnKind.DENSE) == [0]


def test_deepseek_v3_first_three_layers_dense() -> None:
    m = load_model("deepseek-v3")
    assert _ffns(m, FfnKind.DENSE) == [0, 1, 2]
    assert _ffns(m, FfnKind.MOE) == list(range(3, 61))
    assert _mixers(m, MixerKind.MLA) == list(range(61))
    # num_nextn_predict_layers 1 is recorded, not counted in the 61.
    assert m.num_nextn_layers == 1


# --- published totals ----------------------------------------------------------------------

# (preset, published total, tolerance, published active or None, tolerance, source)
PUBLISHED = [
    ("gpt-oss-120b", 116.8 * B, 0.03, 5.1 * B, 0.03, "OpenAI gpt-oss model card: 116.8B total, 5.1B active"),
    ("llama-3.1-8b", 8.03 * B, 0.01, None, 0.0, "Meta Llama 3.1 model card: 8.03B"),
    ("llama-3.1-70b", 70.6 * B, 0.01, None, 0.0, "Meta Llama 3.1 model card: 70.6B"),
    ("qwen3-32b", 32.8 * B, 0.02, None, 0.0, "Qwen3-32B model card: 32.8B"),
    ("qwen3-235b-a22b", 235 * B, 0.03, 22 * B, 0.03, "Qwen3-235B-A22B model card: 235B total, 22B activated"),
    ("qwen3-235b-a22b-fp8", 235 * B, 0.03, 22 * B, 0.03, "Qwen3-235B-A22B-FP8 model card"),
    ("qwen3-30b-a3b", 30.5 * B, 0.02, None, 0.0, "Qwen3-30B-A3B model card: 30.5B total"),
    ("minimax-m2.5", 229 * B, 0.05, 10 * B, 0.05, "MiniMax-M2.5 model card: 229B total, 10B activated"),
    (
        "nemotron-3-nano-30b-a3b",
        31.6 * B,
        0.05,
        3.2 * B,
        0.05,
        "NVIDIA Nemotron 3 Nano model card: 31.6B total, 3.2B active (excluding embeddings)",
    ),
    ("kimi-k2", 1.03e12, 0.03, 32 * B, 0.03, "Kimi-K2 model card: 1T total (1.03T), 32B activated"),
    ("deepseek-v3", 671 * B, 0.01, 37 * B, 0.03, "DeepSeek-V3 report: 671B main model, 37B activated"),
    ("kimi-k3", 2.8e12, 0.01, None, 0.0, "seed article: 2.8 trillion parameters (SGLang team's count)"),
    ("kimi-linear-48b-a3b", 48 * B, 0.03, 3 * B, 0.05, "Kimi-Linear-48B-A3B model card: 48B total, 3B active"),
]


@pytest.mark.parametrize(("name", "total", "tol", "active", "atol", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_parameter_totals(
    name: str, total: float, tol: float, active: float | None, atol: float, source: str
) -> None:
    m = load_model(name)
    assert m.total_params == pytest.approx(total, rel=tol), f"{name}: total {m.total_params / B:.3f}B vs {source}"
    if active is not None:
        assert m.active_params == pytest.approx(active, rel=atol), (
            f"{name}: active {m.active_params / B:.3f}B vs {source}"
        )


def test_kimi_k3_checkpoint_matches_seed() -> None:
    """Seed §1.1/§1.5: the checkpoint is 1.56 TB = 1,454 GiB, experts 93 %, everything else 107 GiB,
    of which 57 GiB KDA attention and 10 GiB MLA; the latent projections 9 GiB."""
    m = load_model("kimi-k3")
    gib = 1024**3
    assert m.checkpoint_bytes == pytest.approx(1.56e12, rel=0.005)
    assert m.checkpoint_bytes / gib == pytest.approx(1454, rel=0.005)
    experts = m.kind_bytes(TensorKind.ROUTED_EXPERTS)
    assert experts / m.checkpoint_bytes == pytest.approx(0.93, abs=0.005)
    assert (m.checkpoint_bytes - experts) / gib == pytest.approx(107, rel=0.02)
    assert m.kind_bytes(TensorKind.ATTENTION_KDA) / gib == pytest.approx(57, rel=0.02)
    assert m.kind_bytes(TensorKind.ATTENTION_MLA) / gib == pytest.approx(10, rel=0.05)
    assert m.kind_bytes(TensorKind.LATENT_PROJECTIONS) / gib == pytest.approx(9, rel=0.05)


def test_kimi_k3_routed_expert_params_by_hand() -> None:
    m = load_model("kimi-k3")
    # 92 MoE layers × 896 experts × 3 matrices × moe_intermediate 3072 × latent 3584.
    assert m.kind_params(TensorKind.ROUTED_EXPERTS) == 92 * 896 * 3 * 3072 * 3584
    assert m.moe is not None
    assert (m.moe.num_experts, m.moe.experts_per_token, m.moe.latent_dim) == (896, 16, 3584)


# --- nested text_config and the two Kimi-Linear formats -----------------------------------------


def test_kimi_k3_reads_nested_text_config() -> None:
    m = load_model("kimi-k3")
    # Top-level model_type kimi_k3; hidden_size 7168 and 93 layers live only in text_config.
    assert m.model_type == "kimi_k3"
    assert m.hidden_size == 7168
    assert m.vocab_size == 163840
    assert m.num_layers == 93
    assert m.multimodal  # the wrapper's vision_config is seen
    assert m.kind_bytes(TensorKind.VISION) > 0
    # The same language model read from text_config alone: identical layers and text tensors.
    config = _preset_config("kimi-k3")
    text_only = model_from_config(config["text_config"], "k3-text")
    assert text_only.model_type == "kimi_linear"
    assert text_only.layers == m.layers
    assert not text_only.multimodal
    no_vision = [row for row in _inventory(m) if row[1] != TensorKind.VISION.value]
    assert _inventory(text_only) == no_vision


def test_kimi_linear_moonshot_and_layer_types_formats_agree() -> None:
    moonshot = load_model(str(KIMI_TINY_MOONSHOT))
    layer_types = load_model(str(KIMI_TINY_LAYER_TYPES))
    # Moonshot's full_attn_layers [4, 8] (1-based) are layer_types' full_attention at 0-based 3 and 7.
    for m in (moonshot, layer_types):
        assert _mixers(m, MixerKind.MLA) == [3, 7]
        assert _mixers(m, MixerKind.KDA) == [0, 1, 2, 4, 5, 6]
        assert _ffns(m, FfnKind.DENSE) == [0]
        assert _ffns(m, FfnKind.MOE) == [1, 2, 3, 4, 5, 6, 7]
        assert m.family == "kda_mla_moe"
    assert moonshot.layers == layer_types.layers
    assert _inventory(moonshot) == _inventory(layer_types)
    assert moonshot.checkpoint_bytes == layer_types.checkpoint_bytes
    assert moonshot.linear is not None and layer_types.linear is not None
    lm, ll = moonshot.linear, layer_types.linear
    assert (lm.state_heads, lm.state_dk, lm.state_dv, lm.conv_kernel, lm.conv_dim) == (4, 32, 32, 4, 3 * 4 * 32)
    assert (ll.state_heads, ll.state_dk, ll.state_dv, ll.conv_kernel, ll.conv_dim) == (4, 32, 32, 4, 3 * 4 * 32)


def test_kimi_linear_layer_listed_twice_is_an_error() -> None:
    config = _fixture(KIMI_TINY_MOONSHOT)
    config["linear_attn_config"]["full_attn_layers"] = [3, 4, 8]  # 3 is also a KDA layer
    with pytest.raises(TokenmillError, match="full_attn_layers") as exc:
        model_from_config(config, "tiny")
    assert "\n" not in str(exc.value)


def test_kimi_linear_layer_missing_from_schedule_is_an_error() -> None:
    config = _fixture(KIMI_TINY_MOONSHOT)
    config["linear_attn_config"]["full_attn_layers"] = [4]  # layer 8 (1-based) listed nowhere
    with pytest.raises(TokenmillError, match="8"):
        model_from_config(config, "tiny")


def test_a_config_with_absurd_sizes_is_refused_before_anything_is_built() -> None:
    # 10¹² layers would be 10¹² layer objects: refused in one line instead of a MemoryError
    config = _fixture(KIMI_TINY_MOONSHOT)
    config["num_hidden_layers"] = 10**12
    with pytest.raises(TokenmillError, match=r"field 'num_hidden_layers' must be at most 10,000") as exc:
        model_from_config(config, "tiny")
    assert "\n" not in str(exc.value)


def test_a_token_cannot_use_more_experts_than_the_layer_has() -> None:
    config = json.loads(
        (Path(str(resources.files("tokenmill.spec") / "presets")) / "Qwen--Qwen3-30B-A3B_config.json").read_text()
    )
    config["num_experts_per_tok"] = config["num_experts"] + 1
    with pytest.raises(TokenmillError, match=r"'num_experts_per_tok' \(experts a token uses\) must be at most the 128"):
        model_from_config(config, "qwen3-30b-a3b")


# --- Qwen3-Next (Gated DeltaNet hybrid) ---------------------------------------------------------

# Hand count of Qwen3-Next-80B-A3B from the fixture's numbers (HF Qwen3NextForCausalLM modules):
#   routed experts  48 layers × 512 × 3 × 512 × 2048                       = 77,309,411,328
#   routed, active  48 × 10 × 3 × 512 × 2048                               =  1,509,949,440
#   GDN per layer   in_proj_qkvz (2·16·128 + 2·32·128 = 12288) × 2048      =     25,165,824
#                   in_proj_ba (2·32 = 64) × 2048                          =        131,072
#                   conv1d (2·16·128 + 32·128 = 8192) × 4                  =         32,768
#                   A_log 32 + dt_bias 32 + norm 128                       =            192
#                   out_proj 2048 × (32·128 = 4096)                        =      8,388,608
#                   → 33,718,464 × 36 GDN layers                           =  1,213,864,704
#   GQA per layer   q_proj (16·256·2 = 8192, gated) × 2048                 =     16,777,216
#                   k_proj, v_proj 2 × (2·256 = 512) × 2048                =      2,097,152
#                   o_proj 2048 × 4096                                     =      8,388,608
#                   q_norm + k_norm 2 × 256                                =            512
#                   → 27,263,488 × 12 GQA layers                           =    327,161,856
#   shared expert   (3 × 512 × 2048 + gate 2048) × 48                      =    151,093,248
#   router          512 × 2048 × 48                                        =     50,331,648
#   norms           2 × 2048 × 48 + final 2048                             =        198,656
#   lm_head         151936 × 2048 (untied)                                 =    311,164,928
#   embedding       151936 × 2048                                          =    311,164,928
QWEN3_NEXT_ACTIVE = (
    1_509_949_440 + 1_213_864_704 + 327_161_856 + 151_093_248 + 50_331_648 + 198_656 + 311_164_928
)  # = 3,563,764,480
QWEN3_NEXT_TOTAL = QWEN3_NEXT_ACTIVE - 1_509_949_440 + 77_309_411_328 + 311_164_928  # = 79,674,391,296


def test_qwen3_next_loads_as_gdn_hybrid() -> None:
    m = load_model(str(QWEN3_NEXT))
    assert m.family == "gdn_hybrid"
    assert m.model_type == "qwen3_next"
    assert m.name == "qwen3_next_80b_a3b"
    # full_attention_interval 4: layers 3, 7, …, 47 (0-based) are full attention → 12; the rest 36 GDN.
    assert _mixers(m, MixerKind.GQA) == list(range(3, 48, 4))
    assert len(_mixers(m, MixerKind.GDN)) == 36
    assert m.layer_kind_counts() == {"gdn": 36, "gqa": 12, "ffn_moe": 48}
    assert m.is_hybrid
    lin = m.linear
    assert lin is not None
    # State per layer: 32 value heads of a 128 × 128 matrix; conv over q, k, v: 2·16·128 + 32·128 = 8192.
    assert (lin.state_heads, lin.state_dk, lin.state_dv, lin.conv_dim, lin.conv_kernel) == (32, 128, 128, 8192, 4)
    assert m.gqa is not None
    assert (m.gqa.num_heads, m.gqa.num_kv_heads, m.gqa.head_dim) == (16, 2, 256)


def test_qwen3_next_totals() -> None:
    """Qwen3-Next-80B-A3B model card: 80B total, 3B activated."""
    m = load_model(str(QWEN3_NEXT))
    assert m.total_params == QWEN3_NEXT_TOTAL
    assert m.active_params == QWEN3_NEXT_ACTIVE
    assert m.total_params == pytest.approx(80 * B, rel=0.03)
    # The published "3B activated" is a rounded name: the hand count above is 3.56 B without the
    # embedding lookup (3.87 B with it, Qwen's convention for Qwen3-30B-A3B's "3.3B"). ±15 % around
    # 3 B cannot hold for this architecture; bound it by the "A3B" class instead.
    assert 3.0 * B <= m.active_params < 4.0 * B


def test_qwen3_next_layer_types_equivalent_to_interval() -> None:
    config = _fixture(QWEN3_NEXT)
    by_interval = model_from_config(config, "q")
    explicit = dict(config)
    del explicit["full_attention_interval"]
    explicit["layer_types"] = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(48)]
    by_types = model_from_config(explicit, "q")
    assert by_types.layers == by_interval.layers
    assert _inventory(by_types) == _inventory(by_interval)


def test_qwen3_5_moe_flat_config_uses_gdn_parser() -> None:
    """A flat (un-nested) config with model_type qwen3_5_moe is read like Qwen3-Next."""
    config = _fixture(QWEN3_NEXT)
    config["model_type"] = "qwen3_5_moe"
    m = model_from_config(config, "q35")
    reference = load_model(str(QWEN3_NEXT))
    assert m.family == "gdn_hybrid"
    assert m.layers == reference.layers
    assert _inventory(m) == _inventory(reference)


def test_qwen3_5_moe_wrapper_reads_text_config() -> None:
    """transformers' Qwen3.5-MoE layout: model_type qwen3_5_moe at the top, the language model in
    text_config (model_type qwen3_5_moe_text, layer_types), a vision_config next to it."""
    m = load_model(str(QWEN3_5_WRAPPER))
    reference = load_model(str(QWEN3_NEXT))
    assert m.family == "gdn_hybrid"
    assert m.model_type == "qwen3_5_moe"
    assert m.layer_kind_counts() == {"gdn": 36, "gqa": 12, "ffn_moe": 48}
    assert m.multimodal
    assert _inventory(m) == _inventory(reference)


def test_qwen3_5_moe_wrapper_without_inner_model_type() -> None:
    config = _fixture(QWEN3_5_WRAPPER)
    del config["text_config"]["model_type"]
    m = model_from_config(config, "q35")
    assert m.layer_kind_counts() == {"gdn": 36, "gqa": 12, "ffn_moe": 48}


# --- errors --------------------------------------------------------------------------------


def _write(tmp_path: Path, config: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def test_unknown_model_type_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path, {"model_type": "frobnicator_v9", "hidden_size": 8})
    with pytest.raises(TokenmillError) as exc:
        load_model(str(path))
    msg = str(exc.value)
    assert "frobnicator_v9" in msg
    assert "\n" not in msg
    assert "qwen3_next" in msg  # lists what is supported


def test_missing_model_type_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, {"hidden_size": 8})
    with pytest.raises(TokenmillError, match="model_type"):
        load_model(str(path))


def test_missing_hidden_size_names_field_and_model_type(tmp_path: Path) -> None:
    config = _fixture(QWEN3_NEXT)
    del config["hidden_size"]
    with pytest.raises(TokenmillError) as exc:
        load_model(str(_write(tmp_path, config)))
    msg = str(exc.value)
    assert "hidden_size" in msg
    assert "qwen3_next" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "deepseek-v3", "nemotron-3-nano-30b-a3b", "gpt-oss-120b"])
def test_missing_hidden_size_in_other_families(preset: str) -> None:
    config = _preset_config(preset)
    del config["hidden_size"]
    with pytest.raises(TokenmillError) as exc:
        model_from_config(config, preset)
    assert "hidden_size" in str(exc.value)
    assert config["model_type"] in str(exc.value)


def test_num_hidden_layers_as_string_names_field(tmp_path: Path) -> None:
    config = _fixture(QWEN3_NEXT)
    config["num_hidden_layers"] = "48"
    with pytest.raises(TokenmillError) as exc:
        load_model(str(_write(tmp_path, config)))
    msg = str(exc.value)
    assert "num_hidden_layers" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("value", [0, -4, True, 4.5, None])
def test_bad_num_hidden_layers_values(value: Any) -> None:
    config = _fixture(QWEN3_NEXT)
    config["num_hidden_layers"] = value
    with pytest.raises(TokenmillError, match="num_hidden_layers"):
        model_from_config(config, "q")


def test_nonexistent_path_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(TokenmillError) as exc:
        load_model(str(missing))
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(missing) in msg


def test_non_json_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{ this is not json,\n  at all }\n")
    with pytest.raises(TokenmillError) as exc:
        load_model(str(path))
    msg = str(exc.value)
    assert "\n" not in msg
    assert "JSON" in msg


def test_json_array_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(TokenmillError, match="object"):
        load_model(str(path))


def test_model_directory_with_config_json(tmp_path: Path) -> None:
    model_dir = tmp_path / "Qwen3-Next-80B-A3B-Instruct"
    model_dir.mkdir()
    shutil.copy(QWEN3_NEXT, model_dir / "config.json")
    m = load_model(str(model_dir))
    assert m.name == "Qwen3-Next-80B-A3B-Instruct"
    assert m.family == "gdn_hybrid"
    assert m.total_params == QWEN3_NEXT_TOTAL


def test_preset_names_are_case_and_space_insensitive() -> None:
    assert load_model("  Kimi-K3 ").name == "kimi-k3"


def test_a_config_file_that_is_not_utf8_json_is_one_line_and_a_bom_is_read(tmp_path: Path) -> None:
    binary = tmp_path / "config.json"
    binary.write_bytes(b"\x00\xff\xfe" * 10)
    with pytest.raises(TokenmillError, match=r"^.*config\.json: not a UTF-8 JSON file \(byte 1\)$"):
        load_model(str(binary))
    preset = (resources.files("tokenmill.spec") / "presets" / PRESETS["llama-3.1-8b"].file).read_bytes()
    marked = tmp_path / "marked.json"  # saved by an editor that marks UTF-8 with a byte-order mark
    marked.write_bytes(b"\xef\xbb\xbf" + preset)
    assert load_model(str(marked)).num_layers == 32


# --- GLM-4.5 (glm4_moe) and Mixtral (mixtral) ------------------------------------------------

GLM_4_5 = FIXTURES / "glm_4_5_config.json"
MIXTRAL = FIXTURES / "mixtral_8x7b_config.json"
LLAMA4_SCOUT = FIXTURES / "llama_4_scout_config.json"
LLAMA4_MAVERICK = FIXTURES / "llama_4_maverick_config.json"
GEMMA3 = FIXTURES / "gemma_3_27b_config.json"
QWEN2_5_VL = FIXTURES / "qwen2_5_vl_72b_config.json"
QWEN3_VL = FIXTURES / "qwen3_vl_235b_a22b_config.json"
PHI4 = FIXTURES / "phi_4_config.json"
GEMMA2 = FIXTURES / "gemma_2_27b_config.json"

# GLM-4.5 (zai-org/GLM-4.5 config.json), by hand:
#   embedding + lm_head  2 × 151552 × 5120 (untied)                                 =  1,551,892,480
#   attention per layer  q 5120×12288 + bias 12288, k and v 5120×1024 + bias 1024 each,
#                        o 12288×5120, q/k norms 2 × 128                              =    136,329,472
#                        × 92 layers                                                  = 12,542,311,424
#   dense MLP            3 × 5120 × 12288 × 3 layers (first_k_dense_replace 3)        =    566,231,040
#   routed experts       160 × 3 × 5120 × 1536 × 89 MoE layers                        = 335,963,750,400
#   shared expert        3 × 5120 × 1536 × 89                                         =  2,099,773,440
#   router               160 × 5120 × 89                                              =     72,908,800
#   norms                2 × 5120 × 92 + final 5120                                   =        947,200
GLM_4_5_TOTAL = 1_551_892_480 + 12_542_311_424 + 566_231_040 + 335_963_750_400 + 2_099_773_440 + 72_908_800 + 947_200
# Active: all but 152 of the 160 routed experts of each MoE layer, and not the embedding lookup
GLM_4_5_ACTIVE = GLM_4_5_TOTAL - 152 * 3 * 5120 * 1536 * 89 - 151552 * 5120

# Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json), by hand:
#   embedding + lm_head  2 × 32000 × 4096                                             =    262,144,000
#   attention            (2 × 4096 × 4096 + 2 × 4096 × 1024) × 32                     =  1,342,177,280
#   experts              8 × 3 × 4096 × 14336 × 32                                    = 45,097,156,608
#   router               8 × 4096 × 32                                                =      1,048,576
#   norms                2 × 4096 × 32 + 4096                                         =        266,240
MIXTRAL_TOTAL = 262_144_000 + 1_342_177_280 + 45_097_156_608 + 1_048_576 + 266_240
MIXTRAL_ACTIVE = MIXTRAL_TOTAL - 6 * 3 * 4096 * 14336 * 32 - 32000 * 4096


def test_glm_4_5_reads_as_gqa_moe_with_three_dense_layers() -> None:
    m = load_model(str(GLM_4_5))
    assert (m.model_type, m.family) == ("glm4_moe", "moe_gqa")
    assert _ffns(m, FfnKind.DENSE) == [0, 1, 2] and _ffns(m, FfnKind.MOE) == list(range(3, 92))
    assert _mixers(m, MixerKind.GQA) == list(range(92))
    assert m.gqa is not None and (m.gqa.num_heads, m.gqa.num_kv_heads, m.gqa.head_dim) == (96, 8, 128)
    assert m.moe is not None
    assert (m.moe.num_experts, m.moe.experts_per_token, m.moe.num_shared_experts) == (160, 8, 1)
    assert m.num_nextn_layers == 1 and any("MTP" in n for n in m.notes)


def test_glm_4_5_totals_by_hand_and_published() -> None:
    """GLM-4.5 model card: 355B total parameters, 32B active (its count includes the MTP layer,
    left out here: 352.8B)."""
    m = load_model(str(GLM_4_5))
    assert m.total_params == GLM_4_5_TOTAL
    assert m.active_params == GLM_4_5_ACTIVE
    assert m.total_params == pytest.approx(355 * B, rel=0.01), "GLM-4.5 model card: 355B total (±1 %)"
    assert m.active_params == pytest.approx(32 * B, rel=0.05), "GLM-4.5 model card: 32B active (±5 %)"


def test_mixtral_totals_by_hand_and_published() -> None:
    """Mistral's Mixtral 8x7B announcement: 46.7B total parameters, 12.9B used per token."""
    m = load_model(str(MIXTRAL))
    assert (m.model_type, m.family) == ("mixtral", "moe_gqa")
    assert m.layer_kind_counts() == {"gqa": 32, "ffn_moe": 32}
    assert m.total_params == MIXTRAL_TOTAL
    assert m.active_params == MIXTRAL_ACTIVE
    assert m.total_params == pytest.approx(46.7 * B, rel=0.01), "Mixtral 8x7B: 46.7B total (±1 %)"
    assert m.active_params == pytest.approx(12.9 * B, rel=0.02), "Mixtral 8x7B: 12.9B per token (±2 %)"


def test_a_mixtral_config_with_a_sliding_window_reads_as_sliding_layers() -> None:
    config = _fixture(MIXTRAL) | {"sliding_window": 4096}
    m = model_from_config(config, "mixtral-swa")
    assert _mixers(m, MixerKind.SWA) == list(range(32))
    assert m.gqa is not None and m.gqa.sliding_window == 4096
    # a window as long as the context is no window
    full = model_from_config(_fixture(MIXTRAL) | {"sliding_window": 32768}, "mixtral-full")
    assert _mixers(full, MixerKind.GQA) == list(range(32))


@pytest.mark.parametrize(
    "path",
    [GLM_4_5, MIXTRAL, LLAMA4_MAVERICK, GEMMA3, QWEN2_5_VL, QWEN3_VL],
    ids=["glm-4.5", "mixtral-8x7b", "llama-4-maverick", "gemma-3-27b", "qwen2.5-vl-72b", "qwen3-vl-235b"],
)
def test_new_families_plan_and_predict(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    """The families run through the planner and the cost model: one H200 board holds each in
    BF16 (706, 93, 803, 55, 147 and 471 GB of weights), and a closed-loop point gives finite times."""
    deployment = ("--model", str(path), "--gpu", "h200", "--gpus", "8")
    plan = cli_json(capsys, "plan", *deployment, "--json")
    assert plan["fits"] is True
    point_flags = ("--isl", "1024", "--osl", "256", "--concurrency", "8", "--backend", "sglang", "--json")
    point = cli_json(capsys, "predict", *deployment, *point_flags)
    assert 0 < point["tpot_ms"] < 100 and 0 < point["ttft_ms"] < 5_000


# --- Llama 4 (llama4): chunked local attention, interleaved MoE ------------------------------

# Llama 4 Scout (meta-llama/Llama-4-Scout-17B-16E config.json), by hand:
#   embedding + lm_head  2 × 202048 × 5120 (untied)                                  =  2,068,971,520
#   attention            (2 × 5120 × 5120 + 2 × 5120 × 1024) × 48                      =  3,019,898,880
#   routed experts       16 × 3 × 5120 × 8192 × 48 MoE layers                          = 96,636,764,160
#   shared expert        3 × 5120 × 8192 × 48                                          =  6,039,797,760
#   router               16 × 5120 × 48                                                =      3,932,160
#   norms                2 × 5120 × 48 + final 5120                                    =        496,640
#   vision encoder       patch 1408 × 588, class 1408, positions 577 × 1408; per block
#                        4 × (1408² + 1408) + (5632 × 1408 + 5632) + (1408 × 5632 + 1408)
#                        + 2 norms × 2 × 1408, × 34; pre/post norms 2 × 2 × 1408; adapter
#                        4096 × 5632 + 4096 × 4096; projector 5120 × 4096                =    871,932,416
LLAMA4_VISION = 871_932_416
LLAMA4_SCOUT_TOTAL = (
    2_068_971_520 + 3_019_898_880 + 96_636_764_160 + 6_039_797_760 + 3_932_160 + 496_640 + LLAMA4_VISION
)
# Maverick: 128 experts in the 24 odd layers, dense MLPs of 16,384 in the 24 even ones
#   routed experts 128 × 3 × 5120 × 8192 × 24 = 386,547,056,640; shared 3 × 5120 × 8192 × 24 =
#   3,019,898,880; router 128 × 5120 × 24 = 15,728,640; dense 3 × 5120 × 16384 × 24 = 6,039,797,760
LLAMA4_MAVERICK_TOTAL = (
    2_068_971_520
    + 3_019_898_880
    + 386_547_056_640
    + 3_019_898_880
    + 15_728_640
    + 6_039_797_760
    + 496_640
    + LLAMA4_VISION
)


def test_llama4_scout_has_chunked_layers_and_a_full_one_in_four() -> None:
    """The rotary layers attend within chunks of 8,192 tokens; every fourth layer (3, 7, …, 47)
    has no rotary embedding and attends to the whole context. Scout: every layer MoE."""
    m = load_model(str(LLAMA4_SCOUT))
    assert (m.model_type, m.family) == ("llama4", "moe_gqa")
    assert _mixers(m, MixerKind.GQA) == list(range(3, 48, 4))
    assert _mixers(m, MixerKind.CHUNKED) == [i for i in range(48) if i % 4 != 3]
    assert _ffns(m, FfnKind.MOE) == list(range(48))
    assert m.gqa is not None and (m.gqa.num_heads, m.gqa.num_kv_heads, m.gqa.head_dim) == (40, 8, 128)
    assert m.gqa.attention_chunk == 8192 and m.gqa.sliding_window is None
    assert m.moe is not None and (m.moe.num_experts, m.moe.experts_per_token, m.moe.num_shared_experts) == (16, 1, 1)
    assert m.multimodal


def test_llama4_maverick_interleaves_moe_and_dense_layers() -> None:
    """Maverick's config lists ``moe_layers`` (the odd layers) and ``no_rope_layers``; the dense
    layers' MLP is ``intermediate_size_mlp`` wide."""
    m = load_model(str(LLAMA4_MAVERICK))
    assert _ffns(m, FfnKind.MOE) == list(range(1, 48, 2))
    assert _ffns(m, FfnKind.DENSE) == list(range(0, 48, 2))
    assert m.dense_intermediate == 16384
    assert _mixers(m, MixerKind.GQA) == list(range(3, 48, 4))


def test_llama4_totals_by_hand_and_published() -> None:
    """Meta's Llama 4 announcement: Scout 109B total, Maverick 400B total, both 17B active (that
    count includes the embedding lookup, which ``active_params`` leaves out)."""
    scout, maverick = load_model(str(LLAMA4_SCOUT)), load_model(str(LLAMA4_MAVERICK))
    assert scout.total_params == LLAMA4_SCOUT_TOTAL
    assert maverick.total_params == LLAMA4_MAVERICK_TOTAL
    assert scout.total_params == pytest.approx(109 * B, rel=0.01), "Llama 4 Scout: 109B total (±1 %)"
    assert maverick.total_params == pytest.approx(400 * B, rel=0.01), "Llama 4 Maverick: 400B total (±1 %)"
    embed = 202048 * 5120
    for m in (scout, maverick):
        assert m.active_params + embed == pytest.approx(17 * B, rel=0.02), "Llama 4: 17B active (±2 %)"


def test_llama4_chunked_layers_keep_a_full_cache() -> None:
    """SGLang's default pool caches every token of every layer, chunked or not: 48 layers × 2 ×
    1 KV head per GPU (8 over TP8) × 128 × 2 B = 24,576 B per token per GPU."""
    from tokenmill.hardware import load_gpu
    from tokenmill.plan import Layout, plan_memory

    plan = plan_memory(load_model(str(LLAMA4_SCOUT)), load_gpu("h100"), 8, Layout(tp=8))
    assert plan.sizes.kv_bytes_per_token == 48 * 2 * 1 * 128 * 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"no_rope_layers": [1, 0, 1]}, "no_rope_layers"),
        ({"no_rope_layers": [2] * 48}, "no_rope_layers"),
        ({"moe_layers": [0, 48]}, "moe_layers"),
        ({"attention_chunk_size": -1}, "attention_chunk_size"),
        ({"intermediate_size_mlp": None, "interleave_moe_layer_step": 2}, "intermediate_size_mlp"),
    ],
)
def test_llama4_bad_fields_name_themselves(change: dict[str, Any], field: str) -> None:
    config = _fixture(LLAMA4_SCOUT)
    config["text_config"] = config["text_config"] | change
    with pytest.raises(TokenmillError, match=rf"field '{field}'.*model_type llama4_text"):
        model_from_config(config, "llama4-bad")


def test_llama4_without_a_chunk_is_full_attention() -> None:
    config = _fixture(LLAMA4_SCOUT)
    config["text_config"] = config["text_config"] | {"attention_chunk_size": None}
    m = model_from_config(config, "llama4-full")
    assert _mixers(m, MixerKind.GQA) == list(range(48)) and m.gqa is not None and m.gqa.attention_chunk is None


# --- Gemma 3 (gemma3): sliding windows in five layers of six, tied embeddings ----------------

# Gemma 3 27B (google/gemma-3-27b-it config.json), by hand:
#   embedding (tied)   262208 × 5376                                                   =  1,409,630,208
#   per layer          q 5376 × 4096, k and v 5376 × 2048 each, o 4096 × 5376          =     66,060,288
#                      MLP 3 × 5376 × 21504                                            =    346,816,512
#                      four norms 4 × 5376, q/k norms 2 × 128                          =         21,760
#                      × 62 layers                                                     = 25,599,710,720
#   final norm         5376
#   SigLIP encoder     patch 1152 × 588 + bias 1152, positions (896 / 14)² × 1152; per block
#                      4 × (1152² + 1152) + (4304 × 1152 + 4304) + (1152 × 4304 + 1152)
#                      + 2 norms × 2 × 1152, × 27; post norm 2 × 1152; projector 5376 × 1152
#                      and its norm 1152                                               =    423,060,336
GEMMA3_VISION = 423_060_336
GEMMA3_TOTAL = 1_409_630_208 + 25_599_710_720 + 5376 + GEMMA3_VISION


def test_gemma3_slides_five_layers_in_six() -> None:
    """``sliding_window_pattern`` 6: layers 5, 11, …, 59 attend to the whole context, the other 52
    to the last 1,024 tokens; every layer a dense MLP."""
    m = load_model(str(GEMMA3))
    assert (m.model_type, m.family) == ("gemma3", "dense_gqa")
    assert _mixers(m, MixerKind.GQA) == list(range(5, 62, 6))
    assert len(_mixers(m, MixerKind.SWA)) == 52
    assert m.gqa is not None and (m.gqa.num_heads, m.gqa.num_kv_heads, m.gqa.head_dim) == (32, 16, 128)
    assert m.gqa.sliding_window == 1024
    # layer_types, where a config lists them, win over the pattern
    config = _fixture(GEMMA3)
    config["text_config"] = config["text_config"] | {"layer_types": ["full_attention"] * 62}
    assert _mixers(model_from_config(config, "gemma3-full"), MixerKind.SWA) == []


def test_gemma3_totals_by_hand_and_published() -> None:
    """Hugging Face's google/gemma-3-27b-it: 27.4B parameters (the embedding tied, so counted once)."""
    m = load_model(str(GEMMA3))
    assert m.total_params == GEMMA3_TOTAL
    assert m.total_params == pytest.approx(27.4 * B, rel=0.01), "Gemma 3 27B: 27.4B (±1 %)"
    # active: everything but the vision encoder, the tied embedding once (it is the LM head too)
    assert m.active_params == GEMMA3_TOTAL - GEMMA3_VISION
    assert not any(t.kind is TensorKind.LM_HEAD for t in m.tensors)


def test_gemma3_sliding_layers_cache_every_token_under_sglang() -> None:
    """SGLang turns its sliding-window pool off for Gemma 2/3 (server_args: "not yet supported"):
    62 layers × 2 × 16 KV heads × 128 × 2 B = 507,904 B per token on one GPU, where gpt-oss's
    sliding layers count 0.8 of a full one (``--swa-full-tokens-ratio``)."""
    from tokenmill.hardware import load_gpu
    from tokenmill.plan import Layout, plan_memory

    plan = plan_memory(load_model(str(GEMMA3)), load_gpu("h100"), 1, Layout(tp=1))
    assert plan.sizes.kv_bytes_per_token == 62 * 2 * 16 * 128 * 2
    # gpt-oss-120b on TP8: 1 KV head of 64 per GPU, 18 full layers and 18 sliding at 0.8
    oss = plan_memory(load_model("gpt-oss-120b"), load_gpu("h100"), 8, Layout(tp=8))
    assert oss.sizes.kv_bytes_per_token == round(2 * 1 * 64 * 2 * (18 + 0.8 * 18))


def test_gemma2_slides_every_other_layer_by_hand_and_published() -> None:
    """Gemma 2 27B (google/gemma-2-27b): a 4,096-token window in the even layers, no q/k norms,
    tied embeddings 256000 × 4608; per layer q 4608 × 4096, k and v 4608 × 2048, o 4096 × 4608,
    MLP 3 × 4608 × 36864, four norms; a final norm. 27.23B against the 27.2B Hugging Face lists."""
    m = load_model(str(GEMMA2))
    assert (m.model_type, m.family) == ("gemma2", "dense_gqa")
    assert _mixers(m, MixerKind.SWA) == list(range(0, 46, 2)) and _mixers(m, MixerKind.GQA) == list(range(1, 46, 2))
    assert m.gqa is not None and m.gqa.sliding_window == 4096
    per_layer = 4608 * 4096 + 2 * 4608 * 2048 + 4096 * 4608 + 3 * 4608 * 36864 + 4 * 4608
    assert m.total_params == 256000 * 4608 + 46 * per_layer + 4608
    assert m.total_params == pytest.approx(27.2 * B, rel=0.005), "Gemma 2 27B: 27.2B (±0.5 %)"


def test_gemma3_bad_fields_name_themselves() -> None:
    for change, field in (
        ({"sliding_window": 0}, "sliding_window"),
        ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
        ({"sliding_window_pattern": -6}, "sliding_window_pattern"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ):
        config = _fixture(GEMMA3)
        config["text_config"] = config["text_config"] | change
        with pytest.raises(TokenmillError, match=rf"field '{field}'.*model_type gemma3_text"):
            model_from_config(config, "gemma3-bad")


def test_phi_4_reads_as_dense_gqa_by_hand_and_published() -> None:
    """Phi-4 (microsoft/phi-4, model_type phi3: fused qkv and gate_up projections, the same
    weights): untied embeddings 2 × 100352 × 5120; per layer q and o 5120², k and v 1280 × 5120,
    MLP 3 × 5120 × 17920, two norms; a final norm. 14.66B against the 14.7B Hugging Face lists."""
    m = load_model(str(PHI4))
    assert (m.model_type, m.family) == ("phi3", "dense_gqa")
    assert m.gqa is not None and (m.gqa.num_heads, m.gqa.num_kv_heads, m.gqa.head_dim) == (40, 10, 128)
    per_layer = 2 * 5120 * 5120 + 2 * 1280 * 5120 + 3 * 5120 * 17920 + 2 * 5120
    assert m.total_params == 2 * 100352 * 5120 + 40 * per_layer + 5120
    assert m.total_params == pytest.approx(14.7 * B, rel=0.005), "Phi-4: 14.7B (±0.5 %)"


# --- Qwen's vision-language models (qwen2_5_vl, qwen3_vl_moe) ----------------------------------

# Qwen2.5-VL-72B's vision encoder, by hand: 32 blocks of qkv 3 × 1280 × 1280 + 3840, proj 1280² +
# 1280, gate and up 3456 × 1280 + 3456 each, down 1280 × 3456 + 1280, two RMS norms 2 × 1280
# (19,840,512 a block); patch embedding 1280 × 3 × 2 × 14 × 14; merger norm 1280, 5120 × 5120 +
# 5120 and 8192 × 5120 + 8192
QWEN2_5_VL_VISION = 32 * 19_840_512 + 1280 * 1176 + 1280 + 5120 * 5120 + 5120 + 8192 * 5120 + 8192
# its language model is Qwen2.5-72B's: untied embeddings 2 × 152064 × 8192; per layer q 8192² +
# 8192, k and v 1024 × 8192 + 1024 each, o 8192², MLP 3 × 8192 × 29568, two norms; final norm
QWEN2_5_72B_TEXT = (
    2 * 152064 * 8192
    + 80 * (8192 * 8192 + 8192 + 2 * (1024 * 8192 + 1024) + 8192 * 8192 + 3 * 8192 * 29568 + 2 * 8192)
    + 8192
)
# Qwen3-VL-235B-A22B's, by hand: 27 blocks of qkv 3456 × 1152 + 3456, proj 1152² + 1152, fc1 4304 ×
# 1152 + 4304, fc2 1152 × 4304 + 1152, two LayerNorms 2 × 2 × 1152 (15,239,504 a block); patch
# embedding 1152 × 3 × 2 × 16 × 16 + 1152, positions 2304 × 1152; merger (norm 2 × 1152, 4608² +
# 4608, 4096 × 4608 + 4096) and three deepstack mergers (norm 2 × 4608, the same two layers)
_QWEN3_MERGER = 4608 * 4608 + 4608 + 4096 * 4608 + 4096
QWEN3_VL_VISION = (
    27 * 15_239_504 + 1152 * 1536 + 1152 + 2304 * 1152 + (2 * 1152 + _QWEN3_MERGER) + 3 * (2 * 4608 + _QWEN3_MERGER)
)


def test_qwen2_5_vl_is_qwen2_5_72b_with_its_vision_encoder() -> None:
    """The older Qwen2.5-VL config keeps its text fields at the top level (model_type qwen2_5_vl):
    it reads as Qwen2.5 (q/k/v biases) with the encoder beside it, 73.41B in all against the 73.4B
    Hugging Face lists for Qwen/Qwen2.5-VL-72B-Instruct."""
    m = load_model(str(QWEN2_5_VL))
    assert (m.model_type, m.family) == ("qwen2_5_vl", "dense_gqa") and m.multimodal
    vision = sum(t.params for t in m.tensors if t.kind is TensorKind.VISION)
    assert vision == QWEN2_5_VL_VISION
    assert m.total_params - vision == QWEN2_5_72B_TEXT
    assert m.total_params == pytest.approx(73.4 * B, rel=0.005), "Qwen2.5-VL-72B: 73.4B (±0.5 %)"


def test_qwen3_vl_moe_is_qwen3_235b_with_its_vision_encoder() -> None:
    """Qwen3-VL-235B-A22B's language model (text_config, qwen3_vl_moe_text) is Qwen3-235B-A22B's,
    to the parameter; the encoder adds its deepstack mergers."""
    m, text = load_model(str(QWEN3_VL)), load_model("qwen3-235b-a22b")
    assert (m.model_type, m.family) == ("qwen3_vl_moe", "moe_gqa")
    assert m.layers == text.layers and m.moe == text.moe and m.gqa == text.gqa
    vision = sum(t.params for t in m.tensors if t.kind is TensorKind.VISION)
    assert vision == QWEN3_VL_VISION
    assert m.total_params - vision == text.total_params
    assert m.active_params == text.active_params  # the encoder is not run for text


def test_qwen_vl_bad_vision_fields_name_themselves() -> None:
    config = _fixture(QWEN3_VL)
    config["vision_config"] = config["vision_config"] | {"depth": 0}
    with pytest.raises(TokenmillError, match=r"\[vision_config\]: field 'depth' must be a positive integer"):
        model_from_config(config, "qwen3-vl-bad")
    config = _fixture(QWEN2_5_VL)
    config["vision_config"] = config["vision_config"] | {"out_hidden_size": "wide"}
    with pytest.raises(TokenmillError, match=r"field 'out_hidden_size' must be an integer"):
        model_from_config(config, "qwen2.5-vl-bad")


# --- DeepSeek-V3.2 (deepseek_v32): DeepSeek-V3 with DeepSeek Sparse Attention's indexer ---------

DEEPSEEK_V32 = FIXTURES / "deepseek_v3_2_config.json"

# The indexer of each of the 61 MLA layers, by hand (index_n_heads 64, index_head_dim 128):
#   wq_b          64 × 128 × 1536 (q_lora_rank)      = 12,582,912
#   wk            128 × 7168                          =    917,504
#   k_norm        weight and bias, 2 × 128            =        256
#   weights_proj  64 × 7168                           =    458,752
#                 per layer 13,959,424 × 61           = 851,524,864
V32_INDEXER = (12_582_912 + 917_504 + 256 + 458_752) * 61


def test_deepseek_v3_2_is_deepseek_v3_with_an_indexer_per_layer() -> None:
    v32, v3 = load_model(str(DEEPSEEK_V32)), load_model("deepseek-v3")
    assert v32.model_type == "deepseek_v32" and v32.family == v3.family == "mla_moe"
    assert v32.layers == v3.layers
    assert v32.mla is not None and v32.mla.sparse and not (v3.mla is not None and v3.mla.sparse)
    assert (v32.mla.index_topk, v32.mla.index_heads, v32.mla.index_head_dim) == (2048, 64, 128)
    assert v32.total_params - v3.total_params == V32_INDEXER
    assert v32.num_nextn_layers == 1  # the MTP layer, recorded and not counted, as for V3
