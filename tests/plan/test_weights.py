"""Weights per GPU against the seed (000 §2.1, §3.1): TP8 on B300 192 GiB, TP4 372 GiB, DP
attention on 8 GPUs 254 GiB, TP16 on H200 102 GiB, TP32 on H200 57 GiB (±2 % each)."""

from __future__ import annotations

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory, weights_per_stage
from tokenmill.spec import TensorKind, load_model
from tokenmill.units import GiB

K3 = load_model("kimi-k3")


@pytest.mark.parametrize(
    ("gpu", "gpus", "layout", "seed_gib"),
    [
        ("b300", 8, Layout(tp=8), 192),
        ("b300", 4, Layout(tp=4), 372),
        ("b300", 8, Layout(tp=8, dp_attention=8), 254),
        ("h200", 16, Layout(tp=16), 102),
        ("h200", 32, Layout(tp=32, ep=32), 57),
        ("h200", 32, Layout(tp=32), 57),  # slices or whole experts: same memory (seed §3.1)
    ],
    ids=[
        "tp8-b300-192",
        "tp4-b300-372",
        "dpattn8-b300-254",
        "tp16-h200-102",
        "tp32ep32-h200-57",
        "tp32-h200-57",
    ],
)
def test_weights_per_gpu_match_seed_within_2pct(gpu: str, gpus: int, layout: Layout, seed_gib: float) -> None:
    plan = plan_memory(K3, load_gpu(gpu), gpus, layout)
    assert abs(plan.weights_per_gpu / GiB - seed_gib) <= 0.02 * seed_gib, plan.weights_per_gpu / GiB


def test_tp4_on_four_b300_does_not_fit_and_says_why() -> None:
    plan = plan_memory(K3, load_gpu("b300"), 4, Layout(tp=4))
    assert plan.fits is False
    assert plan.reason is not None and "weights need 372" in plan.reason and "268.60 GiB" in plan.reason


def test_replicated_kinds_are_not_divided_by_tp() -> None:
    tp8 = plan_memory(K3, load_gpu("b300"), 8, Layout(tp=8)).weights_by_kind
    assert tp8[TensorKind.LATENT_PROJECTIONS] == K3.kind_bytes(TensorKind.LATENT_PROJECTIONS)
    assert tp8[TensorKind.ROUTER] == K3.kind_bytes(TensorKind.ROUTER)
    # experts and KDA attention are split 8 ways
    assert abs(tp8[TensorKind.ROUTED_EXPERTS] * 8 - K3.kind_bytes(TensorKind.ROUTED_EXPERTS)) < 8 * 92
    assert tp8[TensorKind.ATTENTION_KDA] * 8 > K3.kind_bytes(TensorKind.ATTENTION_KDA)  # f_a stays whole


def test_dp_attention_copies_the_67_gib_of_attention_to_every_gpu() -> None:
    dp = plan_memory(K3, load_gpu("b300"), 8, Layout(tp=8, dp_attention=8)).weights_by_kind
    attention = dp[TensorKind.ATTENTION_KDA] + dp[TensorKind.ATTENTION_MLA]
    assert abs(attention / GiB - 67) <= 0.5  # seed: 57 + 10 GiB


def test_pipeline_stages_cover_every_layer_once() -> None:
    stages = weights_per_stage(K3, Layout(tp=1, pp=8))
    covered = [i for st in stages for i in st.layers]
    assert covered == list(range(93))
    # seed §4.2: 8 stages hold 11 or 12 of the 93 layers each
    assert sorted({len(st.layers) for st in stages}) == [11, 12]
    # the embedding sits on the first stage, lm_head on the last
    assert TensorKind.EMBEDDING in stages[0].bytes_by_kind and TensorKind.LM_HEAD not in stages[0].bytes_by_kind
    assert TensorKind.LM_HEAD in stages[-1].bytes_by_kind
