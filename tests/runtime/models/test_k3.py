"""K3's additions against a plain per-token reference written from the published description.

Each addition (Stable LatentMoE with its norm, SiTU-GLU, Block Attention Residuals, KDA's
full-rank output gate with the lower-bounded forget gate, MLA's output gate) is checked alone
(every other K3 flag off) and all together, over a 150-token prefill (three KDA chunks) and a few
decode steps. The reference runs in float64; the model in float32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.runtime.models import k3  # noqa: E402
from tests.runtime.models.engine import TinyEngine  # noqa: E402
from tokenmill.runtime.models import build_model, load_model, parse_config  # noqa: E402
from tokenmill.runtime.models.attn_res import mix_rows  # noqa: E402
from tokenmill.runtime.models.ops import glu  # noqa: E402

TOL = 1e-4
# The published configs ship inside the package as planning presets (copies of ../shared/models).
SHARED = Path(__file__).resolve().parents[3] / "src" / "tokenmill" / "spec" / "presets"

OFF = {
    "latent_moe": {"routed_expert_hidden_size": None, "latent_moe_use_norm": None},
    "situ": {"hidden_act": "silu"},
    "attn_res": {"attn_res_block_size": None},
    "kda_gates": {"use_full_rank_gate": None, "gate_lower_bound": None},
    "mla_gate": {"mla_use_output_gate": None},
}


def only(feature: str | None) -> dict[str, Any]:
    """Overrides that switch off every K3 addition but ``feature`` (None: all off)."""
    out: dict[str, Any] = {}
    for name, off in OFF.items():
        if name != feature:
            out.update(off)
    return out


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run_against_reference(
    path: Path, tc: dict[str, Any], prefix: str = "", chunk: int | None = None, nested: bool = True
) -> float:
    sd = k3.write_checkpoint(path, tc, prefix=prefix, nested=nested)
    model = load_model(path)
    ids, decode = prompt(150, seed=1), prompt(4, seed=2)
    eng = TinyEngine(model)
    seq = eng.new_seq()
    chunk = chunk or len(ids)
    ours = torch.cat([eng.step([(seq, ids[lo : lo + chunk], {})], all_logits=True) for lo in range(0, len(ids), chunk)])
    ours = torch.cat([ours, *(eng.step([(seq, [t], {})]) for t in decode)])
    ref = k3.Reference(sd, tc)
    expected = torch.stack([ref.token(t) for t in ids + decode]).float()
    return float((ours - expected).abs().max() / expected.abs().max())


@pytest.mark.parametrize("feature", [*OFF, None, "all"])
def test_addition_matches_per_token_reference(tmp_path: Path, feature: str | None) -> None:
    tc = k3.text_config() if feature == "all" else k3.text_config(**only(feature))
    prefix = "language_model." if feature == "all" else ""  # K3's multimodal checkpoints nest the text model
    assert run_against_reference(tmp_path, tc, prefix, nested=feature is not None) < TOL


def test_all_additions_with_chunked_prefill(tmp_path: Path) -> None:
    assert run_against_reference(tmp_path, k3.text_config(), chunk=50) < TOL


def test_situ_glu_elementwise() -> None:
    gate = torch.linspace(-30, 30, 121)
    up = torch.linspace(-80, 80, 121).flip(0)
    ours = glu(gate, up, "situ", 4.0, 25.0)
    for g, u, o in zip(gate.tolist(), up.tolist(), ours.tolist(), strict=True):
        act = 4.0 * math.tanh(g / 4.0) / (1.0 + math.exp(-g))
        assert o == pytest.approx(act * 25.0 * math.tanh(u / 25.0), rel=1e-5, abs=1e-6)


def test_attn_res_mix_per_token() -> None:
    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(5, 16, generator=g) * (j + 1) for j in range(3)]
    proj, norm = torch.randn(1, 16, generator=g), 1 + 0.1 * torch.randn(16, generator=g)
    ours = mix_rows(rows, proj, norm, 1e-5)
    for t in range(5):
        scores = [float(proj[0] @ k3.rms(r[t], norm, 1e-5)) for r in rows]
        z = sum(math.exp(s) for s in scores)
        expected = sum(math.exp(s) / z * r[t] for s, r in zip(scores, rows, strict=True))
        torch.testing.assert_close(ours[t], expected)


def test_k3_tensor_names() -> None:
    """The on-disk names chosen for K3's additions (documented in the model modules)."""
    model = build_model(parse_config({"model_type": "kimi_k3", "text_config": k3.text_config()}), device="meta")
    names = {s.name for s in model.tensors()}
    kda = "model.layers.0.self_attn."
    assert {
        kda + n
        for n in (
            "g_proj.weight",
            "A_log",
            "dt_bias",
            "f_a_proj.weight",
            "f_b_proj.weight",
            "q_conv1d.weight",
            "o_norm.weight",
        )
    } <= names
    assert kda + "g_a_proj.weight" not in names
    moe = "model.layers.3.block_sparse_moe."
    assert {
        moe + n
        for n in (
            "gate.weight",
            "gate.e_score_correction_bias",
            "experts.7.w1.weight",
            "routed_expert_down_proj.weight",
            "routed_expert_up_proj.weight",
            "routed_expert_norm.weight",
            "shared_experts.down_proj.weight",
        )
    } <= names
    assert "model.layers.3.self_attn.g_proj.weight" in names
    assert "model.layers.0.mlp.gate_proj.weight" in names
    res = {f"model.layers.2.{w}_res_{k}.weight" for w in ("attn", "mlp") for k in ("proj", "norm")}
    assert res <= names


def _published(name: str) -> dict[str, Any]:
    file = SHARED / name
    assert file.is_file(), f"{file} not bundled"
    return dict(json.loads(file.read_text()))


def _params(raw: dict[str, Any]) -> tuple[Any, int]:
    cfg = parse_config(raw)
    model = build_model(cfg, torch.bfloat16, "meta")
    return model, sum(p.numel() for p in model.parameters())


def test_published_k3_config() -> None:
    model, total = _params(_published("moonshotai--Kimi-K3_config.json"))
    cfg = model.config
    assert [i for i, t in enumerate(cfg.attn_types) if t == "mla"] == [*range(3, 92, 4), 92]
    assert len(model.linear_layers) == 69 and model.kv_width == 576
    assert model.ssm_shape == (96, 128, 128) and model.conv_shape == (3, 3 * 12288)
    assert cfg.latent_dim == 3584 and cfg.latent_norm and cfg.hidden_act == "situ"
    assert cfg.attn_res_block_size == 12 and cfg.mla_output_gate and cfg.rope is None
    assert cfg.kda_full_rank_gate and cfg.kda_gate_lower_bound == -5.0
    assert cfg.mlp_types[0] == "dense" and set(cfg.mlp_types[1:]) == {"moe"}
    assert total == pytest.approx(2.779e12, rel=0.01)  # reference §3.2: ≈ 2,779 B


def test_published_kimi_linear_and_deepseek_configs() -> None:
    raw = _published("moonshotai--Kimi-Linear-48B-A3B_config.json")
    model, total = _params(raw)  # this copy spells the schedule as 0-based layer_types, which win
    assert model.kv_layers == [i for i, t in enumerate(raw["layer_types"]) if t == "full_attention"]
    assert len(model.kv_layers) + len(model.linear_layers) == 27
    assert total == pytest.approx(49.1e9, rel=0.02)
    model, total = _params(_published("deepseek-ai--DeepSeek-V3_config.json"))
    assert model.config.rope is not None and model.config.rope.rope_type == "yarn"
    assert model.config.mlp_types[:4] == ("dense", "dense", "dense", "moe")
    assert total == pytest.approx(671e9, rel=0.01)
