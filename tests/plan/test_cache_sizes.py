"""State slots, KV bytes, crossing point and the ratio calculator against the seed (000 §1.2–1.3,
§2.3, §3.2) and the cookbook calculator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.plan import (
    KVDtype,
    Layout,
    PrefixCache,
    Speculation,
    cache_sizes,
    crossing_point_tokens,
    length_for_pool_ratio,
    pool_ratio_for_length,
)
from tokenmill.spec import load_model
from tokenmill.units import MiB

K3 = load_model("kimi-k3")


def test_state_slot_53_6_mib_at_tp8_within_0_1_mib() -> None:
    sizes = cache_sizes(K3, Layout(tp=8))
    # by hand: 69 × (12 × 128 × 128 × 4 + 3 × 3 × 12 × 128 × 2) = 56,171,520 B
    assert sizes.state_slot_bytes == 56_171_520
    assert abs(sizes.state_slot_bytes / MiB - 53.6) <= 0.1


def test_state_slot_13_4_mib_at_tp32_within_0_1_mib() -> None:
    sizes = cache_sizes(K3, Layout(tp=32))
    assert abs(sizes.state_slot_bytes / MiB - 13.4) <= 0.1


def test_unsharded_state_is_429_mib_per_request() -> None:
    sizes = cache_sizes(K3, Layout(tp=1))
    assert abs(sizes.state_slot_bytes / MiB - 429) <= 0.5
    assert abs(sizes.state_matrix_bytes / MiB - 414) <= 0.1  # the fp32 matrices alone


def test_mla_27648_bytes_per_token_bf16_and_13824_fp8() -> None:
    assert cache_sizes(K3, Layout(tp=8)).kv_cell_bytes == 27_648
    assert cache_sizes(K3, Layout(tp=8, kv_cache_dtype=KVDtype.FP8)).kv_cell_bytes == 13_824
    # TP does not divide the latent cache (seed §1.2), DCP does per logical token
    assert cache_sizes(K3, Layout(tp=32)).kv_cell_bytes == 27_648
    assert cache_sizes(K3, Layout(tp=8, dcp=8)).kv_bytes_per_token == 27_648 / 8


def test_five_slots_per_request_268_mib_per_gpu() -> None:
    sizes = cache_sizes(K3, Layout(tp=8))
    assert sizes.slots_per_request == 5
    assert abs(5 * sizes.state_slot_bytes / MiB - 268) <= 1


def test_crossing_point_10158_tokens_within_2() -> None:
    assert abs(crossing_point_tokens(cache_sizes(K3, Layout(tp=8))) - 10_158) <= 2


@pytest.mark.parametrize(
    ("layout", "seed_ratio"),
    [
        (Layout(tp=8), 1.10),
        (Layout(tp=8, dcp=8), 8.82),
        (Layout(tp=8, dcp=8, speculative=Speculation("dspark", 7), replayssm=True), 6.28),
    ],
    ids=["low-latency-1.10", "balanced-dcp8-8.82", "dspark-replayssm-6.28"],
)
def test_ratio_for_9216_token_requests_matches_seed_within_0_01(layout: Layout, seed_ratio: float) -> None:
    assert abs(pool_ratio_for_length(cache_sizes(K3, layout), 9216) - seed_ratio) <= 0.01


def test_dspark_without_replayssm_holds_d_extra_slots() -> None:
    # reference §3.1: with D = 8 the DSPARK ratio would be 16.3
    sizes = cache_sizes(K3, Layout(tp=8, dcp=8, speculative=Speculation("dspark", 7)))
    assert sizes.spec_extra_slots == 8
    assert abs(pool_ratio_for_length(sizes, 9216) - 16.3) <= 0.05


def test_h200_tp32_fp8_lazy_ratio_0_08_means_50800_token_requests_within_1pct() -> None:
    layout = Layout(tp=32, ep=32, kv_cache_dtype=KVDtype.FP8, prefix_cache=PrefixCache.EXTRA_BUFFER_LAZY)
    sizes = cache_sizes(K3, layout)
    assert sizes.slots_per_request == 4
    assert abs(length_for_pool_ratio(sizes, 0.08) - 50_800) <= 0.01 * 50_800


def test_long_session_ratios_0_63_and_0_45_for_128k_tokens() -> None:
    # seed §2.3: "0.63 for 128,000 tokens, 0.45 with the drafter" (Balanced server)
    bal = cache_sizes(K3, Layout(tp=8, dcp=8))
    spec = cache_sizes(K3, Layout(tp=8, dcp=8, speculative=Speculation("dspark", 7), replayssm=True))
    assert abs(pool_ratio_for_length(bal, 128_000) - 0.63) <= 0.01
    assert abs(pool_ratio_for_length(spec, 128_000) - 0.45) <= 0.01


def test_fresh_request_224_mib_and_long_session_3_3_gib_of_cache() -> None:
    per_token = cache_sizes(K3, Layout(tp=8)).kv_bytes_per_token
    assert abs(8_500 * per_token / MiB - 224) <= 1
    assert abs(128_000 * per_token / 1024**3 - 3.3) <= 0.05


def test_a_model_without_kv_layers_has_no_crossing_point_and_says_why_it_is_not_planned() -> None:
    """Found by fuzzing: every layer linear gave ``"crossing_point_tokens": Infinity`` (not JSON)
    and "the KV pool holds no page" (no page was ever needed)."""
    import json
    from importlib import resources

    from tokenmill.hardware import load_gpu
    from tokenmill.plan import Layout, plan_memory
    from tokenmill.spec import PRESETS, model_from_config

    config = json.loads(
        (resources.files("tokenmill.spec") / "presets" / PRESETS["kimi-linear-48b-a3b"].file).read_text()
    )
    config["layer_types"] = ["linear_attention"] * len(config["layer_types"])
    model = model_from_config(config, "all-linear", "all-linear.json")
    plan = plan_memory(model, load_gpu("h200"), 1, Layout(tp=1))
    assert crossing_point_tokens(cache_sizes(model, Layout(tp=1))) is None
    assert not plan.fits and "has no layer with a KV cache" in str(plan.reason)
    assert json.loads(json.dumps(plan.to_dict(), allow_nan=False))["crossing_point_tokens"] is None


# DeepSeek-V3.2 (deepseek_v32): DeepSeek-V3's config plus the sparse attention's indexer
V32 = load_model(str(Path(__file__).parents[1] / "spec" / "fixtures" / "deepseek_v3_2_config.json"))


def test_sparse_mla_caches_flashmla_fp8_latents_and_the_indexer_keys() -> None:
    """Per token per layer: an FP8 cache in FlashMLA's sparse layout, 512 FP8 latent values + 4
    FP32 scales (one per 128) + 64 BF16 rope values = 656 B, or 576 × 2 = 1,152 B in BF16, and
    the indexer's 128 FP8 key values + one FP32 scale = 132 B, over 61 layers; dense DeepSeek-V3
    caches 576 values in the KV dtype."""
    assert cache_sizes(V32, Layout(tp=8, kv_cache_dtype=KVDtype.FP8)).kv_cell_bytes == 61 * (656 + 132)
    assert cache_sizes(V32, Layout(tp=8)).kv_cell_bytes == 61 * (1152 + 132)
    v3 = load_model("deepseek-v3")
    assert cache_sizes(v3, Layout(tp=8, kv_cache_dtype=KVDtype.FP8)).kv_cell_bytes == 61 * 576
