"""`perf.token_cost`: the cost of a million tokens at a GPU-hour price, and `predict
--usd-per-gpu-hour`."""

from __future__ import annotations

import pytest

from tests.cli_helpers import cli, cli_json
from tokenmill.errors import TokenmillError
from tokenmill.perf.token_cost import GpuPrices, parse_prices, usd_per_million_tokens


def test_a_million_tokens_cost_the_hours_they_take() -> None:
    # $2.50 an hour, 1,000 tokens a second: 3.6 M tokens an hour, $0.694 a million
    assert usd_per_million_tokens(2.5, 1000.0) == pytest.approx(2.5 / 3.6)
    assert usd_per_million_tokens(2.5, 0.0) is None


def test_inferencex_example_is_this_arithmetic() -> None:
    """InferenceX's dashboard (reference §5.3): B300 Kimi-K2.5 FP4 at 1,059 tok/s/GPU costs
    $0.61 per million tokens, which is a GPU-hour of about $2.33 under cost = price / tokens an
    hour (±1 %: the dashboard rounds to the cent)."""
    assert usd_per_million_tokens(2.33, 1059.0) == pytest.approx(0.61, rel=0.01)


def test_prices_for_every_gpu_or_per_gpu() -> None:
    assert parse_prices("2.5") == GpuPrices(2.5)
    per = parse_prices("H100_SXM=2.1, a100=1.1")
    assert (per.for_gpu("h100"), per.for_gpu("a100")) == (2.1, 1.1)
    with pytest.raises(TokenmillError, match=r"gives no price for h20 \(given: h100, a100\); add h20=PRICE"):
        per.for_gpu("h20")
    assert parse_prices("1.5,h100=2").for_gpu("h20") == 1.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "'0' is not a price in US dollars per GPU-hour > 0"),
        ("-1", "'-1' is not a price"),
        ("nan", "'nan' is not a price"),
        ("cheap", "'cheap' is not a price"),
        ("a10g=1", "'a10g=1': unknown GPU 'a10g'"),
        ("h100=1,H100=2", "two prices for h100"),
        ("1,2", "two prices for every GPU (1 and 2)"),
        (",", "needs a price in US dollars per GPU-hour"),
    ],
)
def test_a_bad_price_is_one_line(text: str, message: str) -> None:
    with pytest.raises(TokenmillError) as exc:
        parse_prices(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


BASE = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--backend", "vllm")
BASE += ("--isl", "1024", "--osl", "256")


def test_predict_prices_each_point_at_its_gpus_price(capsys: pytest.CaptureFixture[str]) -> None:
    one = cli_json(capsys, *BASE, "--concurrency", "16", "--usd-per-gpu-hour", "2.5", "--json")
    assert one["usd_per_million_total_tokens"] == pytest.approx(2.5e6 / 3600 / one["total_throughput_per_gpu"])
    assert one["usd_per_million_output_tokens"] == pytest.approx(2.5e6 / 3600 / one["output_throughput_per_gpu"])
    both = cli_json(
        capsys, *BASE, "--concurrency", "16", "--compare", "gpu=a100", "--usd-per-gpu-hour", "h100=2.5,a100=1.2",
        "--json",
    )  # fmt: skip
    h100, a100 = (x["points"][0] for x in both["layouts"])
    assert (h100["usd_per_gpu_hour"], a100["usd_per_gpu_hour"]) == (2.5, 1.2)
    assert h100["usd_per_million_total_tokens"] == pytest.approx(one["usd_per_million_total_tokens"])
    assert a100["usd_per_million_total_tokens"] == pytest.approx(1.2e6 / 3600 / a100["total_throughput_per_gpu"])
    code, out, _ = cli(capsys, *BASE, "--concurrency", "1,16", "--usd-per-gpu-hour", "2.5")
    assert code == 0 and "$ per M tokens" in out


def test_a_compared_gpu_without_a_price_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *BASE, "--compare", "gpu=a100", "--usd-per-gpu-hour", "h100=2.5")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: --usd-per-gpu-hour gives no price for a100 (given: h100)")


def test_prefill_and_decode_on_two_gpus_cost_their_average_hour(capsys: pytest.CaptureFixture[str]) -> None:
    """4 H200 prefilling at $3 an hour and 4 H20 decoding at $1: $2 a GPU-hour over the 8 GPUs the
    per-GPU throughput divides by; without the H20's price, a one-line error."""
    mixed = ("predict", "--model", "llama-3.1-70b", "--gpu", "h200", "--gpus", "4", "--backend", "sglang")
    mixed += ("--isl", "8192", "--osl", "1024", "--concurrency", "16", "--decode-workers", "1", "--decode-gpu", "h20")
    got = cli_json(capsys, *mixed, "--usd-per-gpu-hour", "h200=3,h20=1", "--json")
    assert got["usd_per_gpu_hour"] == pytest.approx(2.0)
    assert got["usd_per_million_total_tokens"] == pytest.approx(2e6 / 3600 / got["total_throughput_per_gpu"])
    code, _, err = cli(capsys, *mixed, "--usd-per-gpu-hour", "h200=3")
    assert code == 2 and err.startswith("error: --usd-per-gpu-hour gives no price for h20 (given: h200)")
