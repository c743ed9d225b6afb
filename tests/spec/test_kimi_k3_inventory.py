"""Kimi-K3's tensor inventory against the figures the seed publishes (seed 000, §1.1 and §1.5) and
the totals in the reference notes. Tolerances are the issue's; each test names the seed's number."""

from __future__ import annotations

import pytest

from tokenmill.spec import TensorKind, load_model
from tokenmill.units import GiB


@pytest.fixture(scope="module")
def k3():  # type: ignore[no-untyped-def]
    return load_model("kimi-k3")


def within(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * target


def test_checkpoint_is_1454_gib_within_1pct(k3) -> None:  # type: ignore[no-untyped-def]
    assert within(k3.checkpoint_bytes / GiB, 1454, 0.01), k3.checkpoint_bytes / GiB


def test_checkpoint_is_1_56_tb_decimal_within_1pct(k3) -> None:  # type: ignore[no-untyped-def]
    assert within(k3.checkpoint_bytes / 1e12, 1.56, 0.01)


def test_routed_experts_are_93pct_of_checkpoint_within_half_a_point(k3) -> None:  # type: ignore[no-untyped-def]
    share = 100 * k3.kind_bytes(TensorKind.ROUTED_EXPERTS) / k3.checkpoint_bytes
    assert abs(share - 93) <= 0.5, share


def test_16bit_rest_is_107_gib_within_2pct(k3) -> None:  # type: ignore[no-untyped-def]
    rest = k3.checkpoint_bytes - k3.kind_bytes(TensorKind.ROUTED_EXPERTS)
    assert within(rest / GiB, 107, 0.02), rest / GiB
    # and it is all 16-bit (bf16, with a few fp32 KDA scalars)
    for kind, total in k3.by_kind.items():
        if kind is not TensorKind.ROUTED_EXPERTS:
            assert set(total.formats) <= {"bf16", "fp32"}, (kind, total.formats)


@pytest.mark.parametrize(
    ("kind", "seed_gib"),
    [(TensorKind.ATTENTION_KDA, 57), (TensorKind.ATTENTION_MLA, 10), (TensorKind.LATENT_PROJECTIONS, 9)],
)
def test_kda_57_mla_10_latent_9_gib_within_5pct(k3, kind: TensorKind, seed_gib: int) -> None:  # type: ignore[no-untyped-def]
    assert within(k3.kind_bytes(kind) / GiB, seed_gib, 0.05), (kind, k3.kind_bytes(kind) / GiB)


def test_one_moe_layer_of_experts_is_14_6_gib(k3) -> None:  # type: ignore[no-untyped-def]
    per_layer = k3.kind_bytes(TensorKind.ROUTED_EXPERTS) / len(k3.moe_layers) / GiB
    assert within(per_layer, 14.6, 0.01), per_layer


def test_total_2_78t_and_active_104b_params_within_2pct(k3) -> None:  # type: ignore[no-untyped-def]
    assert within(k3.total_params / 1e12, 2.78, 0.02), k3.total_params
    assert within(k3.active_params / 1e9, 104, 0.02), k3.active_params


def test_routed_experts_hold_2722_7b_params_by_hand(k3) -> None:  # type: ignore[no-untyped-def]
    # 92 MoE layers × 896 experts × 3 matrices × 3584 × 3072
    assert k3.kind_params(TensorKind.ROUTED_EXPERTS) == 92 * 896 * 3 * 3584 * 3072
    # MXFP4: 17 B per 32 parameters
    assert k3.kind_bytes(TensorKind.ROUTED_EXPERTS) == 92 * 896 * 3 * 3584 * 3072 * 17 // 32


def test_layer_schedule_is_69_kda_24_mla_and_one_dense_layer(k3) -> None:  # type: ignore[no-untyped-def]
    counts = k3.layer_kind_counts()
    assert counts["kda"] == 69 and counts["mla"] == 24
    assert counts["ffn_dense"] == 1 and counts["ffn_moe"] == 92
    assert k3.layers[0].ffn.value == "dense"  # type: ignore[union-attr]
    assert k3.layers[91].mixer.value == "mla" and k3.layers[92].mixer.value == "mla"  # type: ignore[union-attr]


def test_deepseek_v3_671b_total_37b_active_within_2pct() -> None:
    ds = load_model("deepseek-v3")
    assert within(ds.total_params / 1e9, 671, 0.02), ds.total_params
    assert within(ds.active_params / 1e9, 37, 0.02), ds.active_params
