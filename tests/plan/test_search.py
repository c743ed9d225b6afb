"""Layout search: Kimi-K3 on 8 B300 (seed §2.1) and on 32 H200 (seed §3.1)."""

from __future__ import annotations

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout
from tokenmill.plan.search import Candidate, candidate_layouts, search_layouts
from tokenmill.spec import ModelSpec, load_model

GiB = 1024**3


@pytest.fixture(scope="module")
def k3() -> ModelSpec:
    return load_model("kimi-k3")


@pytest.fixture(scope="module")
def b300_8(k3: ModelSpec) -> list[Candidate]:
    return search_layouts(k3, load_gpu("b300"), 8, Layout())


@pytest.fixture(scope="module")
def h200_32(k3: ModelSpec) -> list[Candidate]:
    return search_layouts(k3, load_gpu("h200"), 32, Layout())


def _plain(c: Candidate, tp: int) -> bool:
    """TP-only worker: no PP, no attention DP (EP, DCP and KV dtype free)."""
    lay = c.layout
    return lay.tp == tp and lay.pp == 1 and lay.dp_attention == 1


def test_fitting_come_first_then_rejected(b300_8: list[Candidate]) -> None:
    fits = [c.fits for c in b300_8]
    n_fit = sum(fits)
    assert n_fit > 0
    assert fits == [True] * n_fit + [False] * (len(fits) - n_fit)


def test_fitting_sorted_by_total_running_requests(b300_8: list[Candidate]) -> None:
    fitting = [c for c in b300_8 if c.fits]
    running = [c.total_running for c in fitting]
    assert running == sorted(running, reverse=True)
    # The best layout admits the most requests of all fitting layouts.
    assert fitting[0].total_running == max(running) > 0
    # total_running counts every replica.
    for c in fitting:
        assert c.plan is not None
        assert c.total_running == c.plan.max_running_requests * c.plan.replicas


def test_every_candidate_uses_all_gpus(b300_8: list[Candidate]) -> None:
    for c in b300_8:
        assert 8 % c.layout.gpus_per_worker == 0
        if c.plan is not None:
            assert c.plan.replicas * c.layout.gpus_per_worker == 8


def test_tp8_fits_and_admits_the_seeds_60(b300_8: list[Candidate]) -> None:
    """Seed §2.1–2.2: TP8 over all 8 GPUs is the layout that fits; at the calculator's ratio for
    9,216-token requests (1.1) the state pool caps it at 60 running requests."""
    tp8 = [c for c in b300_8 if _plain(c, 8) and c.layout.dcp == 1]
    assert tp8 and all(c.fits for c in tp8)
    bf16_kv = [c for c in tp8 if c.layout.kv_cache_dtype.value == "bf16"]
    assert bf16_kv
    for c in bf16_kv:
        assert c.plan is not None
        assert c.plan.replicas == 1
        # Seed: "192 GiB by my arithmetic".
        assert c.plan.weights_per_gpu / GiB == pytest.approx(192, rel=0.01)
        assert c.total_running == pytest.approx(60, abs=1)


def test_tp4_times_two_replicas_rejected_weights(b300_8: list[Candidate]) -> None:
    """Seed §2.1: with only 4 GPUs per copy each GPU would need 372 GiB (> 268.6 GiB)."""
    tp4 = [c for c in b300_8 if _plain(c, 4)]
    assert tp4
    for c in tp4:
        assert not c.fits
        assert c.reason and "weights need" in c.reason
        assert c.plan is not None and c.plan.replicas == 2
        assert c.plan.weights_per_gpu / GiB == pytest.approx(372, rel=0.01)


def test_dp_attention_8_rejected(b300_8: list[Candidate]) -> None:
    """Seed §2.1: DP attention copies the 67 GiB of attention to every GPU: 254 GiB of weights,
    nothing left for the pools."""
    dp8 = [c for c in b300_8 if c.layout.dp_attention == 8]
    assert dp8
    for c in dp8:
        assert not c.fits
        assert c.reason
        assert c.plan is not None
        assert c.plan.weights_per_gpu / GiB == pytest.approx(254, rel=0.02)


def test_every_rejected_candidate_has_a_reason(b300_8: list[Candidate], h200_32: list[Candidate]) -> None:
    for c in b300_8 + h200_32:
        if not c.fits:
            assert c.reason is not None and c.reason.strip()
            assert "\n" not in c.reason
        else:
            assert c.reason is None


def test_search_sees_every_candidate(k3: ModelSpec, b300_8: list[Candidate]) -> None:
    layouts = list(candidate_layouts(k3, 8, Layout()))
    assert len(b300_8) == len(layouts)
    # The K3 MoE gets both EP off and EP = tp; KV in bf16 and fp8.
    assert {c.layout.ep for c in b300_8 if c.layout.tp == 8} == {1, 8}
    assert {c.layout.kv_cache_dtype.value for c in b300_8} == {"bf16", "fp8_e4m3"}


def test_search_defaults_to_the_calculator_at_9216_tokens(b300_8: list[Candidate]) -> None:
    c = next(
        c
        for c in b300_8
        if _plain(c, 8) and c.layout.dcp == 1 and c.layout.ep == 1 and c.layout.kv_cache_dtype.value == "bf16"
    )
    assert c.plan is not None
    # ratio = 5 × 56,171,520 / (9216 × 27,648) = 1.1022 (seed §1.3: "a ratio of 1.1").
    assert c.plan.pools.pool_ratio == pytest.approx(1.1022, abs=1e-3)


def test_progress_callback_counts_up(k3: ModelSpec) -> None:
    seen: list[tuple[int, int]] = []
    search_layouts(k3, load_gpu("b300"), 8, Layout(), progress=lambda i, n: seen.append((i, n)))
    total = seen[-1][1]
    assert [i for i, _ in seen] == list(range(1, total + 1))
    assert all(n == total for _, n in seen)


def test_h200_32_tp32_fits(h200_32: list[Candidate]) -> None:
    """Seed §3.1: on 32 H200 each GPU holds 57 GiB of weights, almost half the card for the pools."""
    tp32 = [c for c in h200_32 if _plain(c, 32)]
    assert tp32 and all(c.fits for c in tp32)
    for c in tp32:
        assert c.plan is not None
        assert c.plan.weights_per_gpu / GiB == pytest.approx(57, rel=0.02)
    assert any(c.layout.ep == 32 and c.layout.kv_cache_dtype.value == "fp8_e4m3" for c in tp32)


def test_h200_32_tp8_times_four_rejected(h200_32: list[Candidate]) -> None:
    """Seed §3.1: four copies of the 8-GPU server are out, each GPU would need 192 GiB."""
    tp8 = [c for c in h200_32 if _plain(c, 8)]
    assert tp8
    for c in tp8:
        assert not c.fits
        assert c.reason and "weights need" in c.reason
        assert c.plan is not None and c.plan.replicas == 4
        assert c.plan.weights_per_gpu / GiB == pytest.approx(192, rel=0.01)


def test_h200_32_best_fit_is_sorted(h200_32: list[Candidate]) -> None:
    fitting = [c for c in h200_32 if c.fits]
    assert fitting
    running = [c.total_running for c in fitting]
    assert running == sorted(running, reverse=True)


@pytest.mark.parametrize("gpus", [0, -8, 65_537, 10**12])
def test_search_refuses_a_gpu_count_it_could_not_enumerate(gpus: int) -> None:
    """Found by fuzzing: --gpus 10¹² looped over every divisor candidate and never ended; 0 and
    negative counts answered "0 layouts fit"."""
    from tokenmill.errors import TokenmillError

    with pytest.raises(TokenmillError, match=r"^--gpus must be a positive integer up to 65,536"):
        search_layouts(load_model("kimi-k3"), load_gpu("b300"), gpus, Layout())
