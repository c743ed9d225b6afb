"""`tokenmill simulate` and `tokenmill sweep` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import cli, cli_json

FIXTURES = Path(__file__).parent / "workload" / "fixtures"
BENCH_KEYS = {"completed", "duration", "request_throughput", "input_throughput", "output_throughput"} | {
    f"{s}_{m}_ms" for s in ("mean", "median", "p90", "p99") for m in ("ttft", "tpot", "itl", "e2e_latency")
}
EXTRA_KEYS = {
    "slo_attainment",
    "goodput",
    "max_running_requests",
    "peak_running_requests",
    "prefix_cache_hit_rate",
    "evictions",
}


def test_simulate_json_has_bench_serving_and_slo_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(
        capsys,
        "simulate",
        "--pool-ratio",
        "1.1",
        "--workload",
        "fresh",
        "--rate",
        "1",
        "--duration",
        "30",
        "--seed",
        "3",
        "--json",
    )
    assert code == 0
    summary = json.loads(out)
    assert set(summary) >= BENCH_KEYS | EXTRA_KEYS
    assert summary["max_running_requests"] == 60


def test_same_seed_gives_byte_identical_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = (
        "simulate",
        "--pool-ratio",
        "1.1",
        "--workload",
        "agentic",
        "--num-requests",
        "4",
        "--rate",
        "0.5",
        "--seed",
        "11",
        "--json",
    )
    first = cli(capsys, *args)[1]
    second = cli(capsys, *args)[1]
    assert first == second and first.strip().startswith("{")
    other = cli(capsys, *args[:-2], "12", "--json")[1]
    assert other != first


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--workload", "bogus"), "--workload"),
        (("--rate", "0"), "--rate"),
        (("--rate", "-2"), "--rate"),
        (("--concurrency", "0"), "--concurrency"),
        (("--workload", f"trace:{FIXTURES / 'agentx_bad.jsonl'}"), "agentx_bad.jsonl:2"),
        (("--workload", f"trace:{FIXTURES / 'otel_bad.jsonl'}"), "otel_bad.jsonl:3"),
        (("--workload", "trace:/no/such/file.jsonl"), "file.jsonl"),
        (("--slo-ttft-ms", "0"), "--slo-ttft-ms"),
        (("--requests-out", "x.txt"), "--requests-out"),
        (("--max-time", "-1"), "--max-time must be a finite number of seconds > 0 (got -1.0)"),
        (("--max-time", "nan"), "--max-time"),
        (("--workload", "random", "--isl", "0"), "--isl must be an integer >= 1 (got 0)"),
        (("--workload", "random", "--osl", "-3"), "--osl must be an integer >= 1 (got -3)"),
        (("--seed", "-1"), "--seed must be an integer >= 0 (got -1)"),
        (("--workload", "long-session", "--turns", "0"), "--turns must be an integer >= 1 (got 0)"),
        (("--workload", "interference", "--probe-tokens", "0"), "--probe-tokens must be an integer >= 1 (got 0)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str
) -> None:
    code, out, err = cli(capsys, "simulate", "--duration", "5", *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_traces_replay(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("agentx.jsonl", "otel_sessions.jsonl"):
        code, out, _ = cli(capsys, "simulate", "--workload", f"trace:{FIXTURES / name}", "--json")
        assert code == 0 and json.loads(out)["completed"] > 0


def test_requests_out_writes_one_row_per_request(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv_path = tmp_path / "rows.csv"
    code, _out, _ = cli(
        capsys,
        "simulate",
        "--workload",
        "random",
        "--isl",
        "500",
        "--osl",
        "20",
        "--num-requests",
        "7",
        "--concurrency",
        "3",
        "--requests-out",
        str(csv_path),
        "--json",
    )
    assert code == 0
    rows = csv_path.read_text().strip().splitlines()
    assert len(rows) == 1 + 7 and rows[0].startswith("request_id,")
    pq = tmp_path / "rows.parquet"
    code, _, _ = cli(
        capsys,
        "simulate",
        "--workload",
        "random",
        "--isl",
        "500",
        "--osl",
        "20",
        "--num-requests",
        "7",
        "--concurrency",
        "3",
        "--requests-out",
        str(pq),
        "--json",
    )
    pyarrow = pytest.importorskip("pyarrow.parquet")
    assert code == 0 and pyarrow.read_table(pq).num_rows == 7


def test_interference_reports_stream_loss_and_draws(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fig = tmp_path / "interference.png"
    code, out, _ = cli(
        capsys,
        "simulate",
        "--pool-ratio",
        "1.1",
        "--workload",
        "interference",
        "--probe-tokens",
        "8400",
        "--probe-tokens",
        "2000",
        "--figure",
        str(fig),
        "--json",
    )
    assert code == 0
    runs = json.loads(out)
    loss = {v["probe_tokens"]: v["stream_output_loss"] for v in runs.values()}
    assert loss[8400] > loss[2000] > 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_rates_sustained_and_figures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fig, lat = tmp_path / "att.svg", tmp_path / "lat.png"
    code, out, _ = cli(
        capsys,
        "sweep",
        "--pool-ratio",
        "1.1",
        "--rates",
        "0.3,3",
        "--find-sustained",
        "--rate-lo",
        "0.2",
        "--rate-hi",
        "3",
        "--duration",
        "40",
        "--concurrencies",
        "1,8",
        "--num-requests",
        "8",
        "--figure",
        str(fig),
        "--latency-figure",
        str(lat),
        "--json",
    )
    assert code == 0
    entry = next(iter(json.loads(out)["layouts"].values()))
    by_rate = {p["rate"]: p["slo_attainment"] for p in entry["rates"]}
    assert by_rate[0.3] > by_rate[3.0]
    assert 0.2 <= entry["sustained_rate"] < 3.0
    assert [p["concurrency"] for p in entry["concurrency"]] == [1, 8]
    assert "<svg" in fig.read_text() and lat.stat().st_size > 0


def test_sweep_needs_something_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "sweep")
    assert code == 2 and "--rates" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--label", "a", "--label", "b"), "2 --label values for 1 layout(s): the base and one per --compare"),
        (("--compare", "pool-ratio=2", "--label", "a", "--label", "a"), "two layouts share the name 'a'"),
        (("--target", "1.5"), "--target must be in (0, 1] (got 1.5)"),
        (("--target", "0"), "--target must be in (0, 1]"),
        (("--find-sustained", "--rate-lo", "2", "--rate-hi", "1"), "--rate-lo and --rate-hi must satisfy 0 < lo < hi"),
    ],
)
def test_sweep_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str
) -> None:
    code, out, err = cli(capsys, "sweep", "--rates", "0.5", "--duration", "5", "--json", *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_sweep_names_a_compared_layout_that_describes_like_the_base_by_its_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the pool ratio is not part of a layout's description: both would be "TP8", one result lost
    code, out, _ = cli(capsys, "sweep", "--rates", "0.5", "--duration", "5", "--compare", "pool-ratio=0.9", "--json")
    assert code == 0
    assert list(json.loads(out)["layouts"]) == ["TP8", "TP8 (pool-ratio=0.9)"]


def test_sweep_compares_gpus_each_with_its_own_constants(capsys: pytest.CaptureFixture[str]) -> None:
    """`--compare gpu=a100` sweeps the layout on an A100 too: named by the GPU, each simulated as
    `sweep --gpu` alone simulates it, and the A100 (2.04 against 3.35 TB/s, 312 against 989 BF16
    TFLOP/s) answers more slowly at the same rate."""
    base = ("sweep", "--model", "llama-3.1-8b", "--gpus", "1", "--backend", "vllm", "--rates", "2", "--duration", "20")
    both = cli_json(capsys, *base, "--gpu", "h100", "--compare", "gpu=a100", "--json")["layouts"]
    assert list(both) == ["TP1 on h100", "TP1 on a100"]
    for name, entry in both.items():
        alone = cli_json(capsys, *base, "--gpu", name.rsplit(" ", 1)[1], "--json")["layouts"]["TP1"]
        assert entry == alone
    h100, a100 = (both[n]["rates"][0] for n in both)
    assert a100["mean_tpot_ms"] > 1.3 * h100["mean_tpot_ms"] and a100["mean_ttft_ms"] > h100["mean_ttft_ms"]
    code, out, err = cli(capsys, *base, "--gpu", "h100", "--compare", "gpu=a10g")
    assert code == 2 and out == "" and err.startswith("error: --compare 'gpu=a10g': gpu: unknown GPU 'a10g'")


def test_without_backend_the_table_says_the_cost_model_is_the_priors(capsys: pytest.CaptureFixture[str]) -> None:
    """``predict`` defaults to SGLang's fitted constants, ``simulate`` and ``sweep`` to the priors:
    a table says so on stderr, and says nothing where fitted constants are used or with --json."""
    base = ("simulate", "--pool-ratio", "1.1", "--workload", "fresh", "--rate", "1", "--duration", "10")
    code, _, err = cli(capsys, *base)
    assert code == 0 and err.startswith("cost model: the priors, not fitted constants") and "--backend" in err
    code, _, err = cli(capsys, *base, "--backend", "sglang")
    assert code == 0 and "priors" not in err
    code, _, err = cli(capsys, *base, "--json")
    assert code == 0 and err == ""
    code, _, err = cli(capsys, "sweep", "--pool-ratio", "1.1", "--rates", "0.5", "--duration", "10")
    assert code == 0 and "cost model: the priors" in err


DSPARK = ["--dcp", "8", "--pool-ratio", "6.28", "--speculative", "dspark:7", "--replayssm"]


@pytest.mark.parametrize("command", ["simulate", "sweep", "predict"])
@pytest.mark.parametrize(
    ("layout", "value", "message"),
    [
        (DSPARK, "nan", "error: --accept-length must be between 1 and the verify width 8 (got nan)"),
        (DSPARK, "0.5", "error: --accept-length must be between 1 and the verify width 8 (got 0.5)"),
        (DSPARK, "9", "error: --accept-length must be between 1 and the verify width 8 (got 9.0)"),
        ([], "2", "error: --accept-length needs speculative decoding (--speculative dspark:B or mtp:N)"),
    ],
)
def test_an_accept_length_the_drafter_cannot_have_is_refused_alike_by_every_command(
    capsys: pytest.CaptureFixture[str], command: str, layout: list[str], value: str, message: str
) -> None:
    """Found in the thirty-ninth session: `simulate` with DSPARK and `--accept-length nan` was a
    traceback from the simulator's executor, and without a drafter it took any value silently;
    `predict` refused both. One check (``perf.acceptance``) serves the three commands now."""
    work = {"simulate": ["--duration", "5"], "sweep": ["--rates", "1", "--duration", "5"], "predict": []}[command]
    code, out, err = cli(capsys, command, *layout, *work, "--accept-length", value, "--json")
    assert (code, out, err.strip()) == (2, "", message)


@pytest.mark.parametrize(("gpu", "chunks"), [("h100", 2), ("h200", 2), ("b200", 1), ("b300", 1)])
def test_a_prompt_is_chunked_at_sglangs_default_for_the_gpu(
    capsys: pytest.CaptureFixture[str], gpu: str, chunks: int
) -> None:
    """SGLang's --chunked-prefill-size: 8,192 tokens on GPUs under 160 GB (H100 80 GB, H200 141 GB),
    16,384 above (B200, B300); `predict`'s replay used that rule, `simulate` 16,384 everywhere
    until the thirty-ninth session. A 10,000-token prompt is two prefill steps or one."""
    base = ["simulate", "--model", "llama-3.1-8b", "--gpu", gpu, "--gpus", "1", "--workload", "random"]
    run = [*base, "--isl", "10000", "--osl", "2", "--num-requests", "1", "--json"]
    code, out, err = cli(capsys, *run)
    assert code == 0, err
    assert json.loads(out)["prefill_steps"] == chunks
    code, out, err = cli(capsys, *run, "--chunk-tokens", "4096")  # the flag still decides
    assert code == 0, err
    assert json.loads(out)["prefill_steps"] == 3


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_the_backend_is_read_as_predict_reads_it(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`predict --backend SGLang` always worked; `simulate` and `sweep` refused it until the
    thirty-ninth session. The same constants either way."""
    work = ["--duration", "5", "--json"] if command == "simulate" else ["--rates", "1", "--duration", "5", "--json"]
    _, lower, _ = cli(capsys, command, "--backend", "sglang", *work)
    code, mixed, err = cli(capsys, command, "--backend", " SGLang ", *work)
    assert code == 0, err
    assert mixed == lower
    code, _, err = cli(capsys, command, "--backend", "tgi", *work)
    assert (code, err.strip()) == (2, "error: --backend must be one of sglang|vllm|trtllm|tokenmill (got 'tgi')")


def test_simulate_and_sweep_take_set_what_ifs(capsys: pytest.CaptureFixture[str]) -> None:
    """``--set`` changes a fitted constant for the run and says so: one 8B model on one H100 under
    vLLM's constants, its kernels at half the engine's fitted speed (``compute_scale``), prefills
    slower, so its first tokens come later; a constant outside its bounds is refused."""
    run = (
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--gpus",
        "1",
        "--workload",
        "random",
        "--isl",
        "2000",
        "--osl",
        "50",
        "--concurrency",
        "2",
        "--num-requests",
        "8",
        "--backend",
        "vllm",
        "--json",
    )
    fitted = cli_json(capsys, *run)
    slower = cli_json(capsys, *run, "--set", "compute_scale=0.5")
    assert slower["mean_ttft_ms"] > 1.3 * fitted["mean_ttft_ms"]
    code, _, err = cli(capsys, *run[:-1], "--set", "compute_scale=0.5")  # a table says so (--json is quiet)
    assert code == 0 and "constants set by --set" in err and "compute_scale" in err
    code, _, err = cli(capsys, "sweep", "--set", "compute_scale=9")
    assert code == 2 and "--set compute_scale must be between 0.3 and 3" in err


def _gaps_cv(path: Path) -> float:
    import csv
    import itertools
    import statistics

    with path.open(newline="") as f:
        sends = sorted(float(r["send_s"]) for r in csv.DictReader(f))
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


def test_burstiness_shapes_the_simulated_arrivals(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--burstiness 1 is the run without it, bit for bit; 0.25 and 4 give gaps whose coefficient of
    variation is near 2 and 0.5 (vLLM's Gamma gaps; 1/√B), and the bursty run meets the SLO less."""
    base = ["simulate", "--pool-ratio", "1.1", "--workload", "fresh", "--rate", "0.7"]
    base += ["--duration", "200", "--seed", "1"]
    plain = cli_json(capsys, *base, "--json")
    assert cli_json(capsys, *base, "--burstiness", "1", "--json") == plain
    runs = {}
    for b in ("0.25", "4"):
        out = tmp_path / f"b{b}.csv"
        runs[b] = cli_json(capsys, *base, "--burstiness", b, "--requests-out", str(out), "--json")
        runs[b]["cv"] = _gaps_cv(out)
    assert runs["0.25"]["cv"] > 1.4, f"B = 0.25: CV {runs['0.25']['cv']:.2f}, 1/√B = 2"
    assert runs["4"]["cv"] < 0.7, f"B = 4: CV {runs['4']['cv']:.2f}, 1/√B = 0.5"
    assert runs["0.25"]["slo_attainment"] < runs["4"]["slo_attainment"]
    code, _, err = cli(capsys, "sweep", "--concurrencies", "1,2", "--burstiness", "2")
    assert code == 2 and "--burstiness" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "simulate", "--concurrency", "2", "--num-requests", "4", "--burstiness", "2")
    assert code == 2 and "needs a finite --rate" in err
