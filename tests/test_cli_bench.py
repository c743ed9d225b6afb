"""`tokenmill bench` through the real entry point, against the fake server of the client tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from tests.cli_helpers import cli
from tests.workload.test_bench_client import FakeServer, free_port
from tokenmill.cli.bench_cmd import _build_workload

TRACE = Path(__file__).parent / "workload" / "fixtures" / "bench_sessions.jsonl"
RUN_KEYS = {"backend", "base_url", "model_id", "max_concurrency", "request_rate", "num_prompts", "dataset_name"}
METRIC_KEYS = {
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "total_token_throughput",
    "request_goodput",
    "slo_attainment",
    "concurrency",
    "max_concurrent_requests",
    "errors",
} | {f"{s}_{m}_ms" for s in ("mean", "median", "std", "p90", "p95", "p99") for m in ("ttft", "tpot", "itl", "e2el")}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def fake(server: FakeServer) -> FakeServer:
    server.reset()
    return server


def bench_args(srv: FakeServer, *extra: str, model: str = "ttft=0.01;itl=0.002") -> list[str]:
    return ["bench", "--base-url", srv.url, "--model", model, "--seed", "1", *extra]


def test_json_prints_one_object_with_bench_serving_keys(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    args = bench_args(fake, "--workload", "random", "--isl", "64", "--osl", "4", "--num-prompts", "8")
    code, out, err = cli(capsys, *args, "--concurrency", "2", "--json")
    assert code == 0, err
    summary = json.loads(out)  # the whole of stdout is one JSON object
    assert isinstance(summary, dict)
    assert set(summary) >= RUN_KEYS | METRIC_KEYS
    assert summary["completed"] == 8 and summary["failed"] == 0
    assert summary["num_prompts"] == 8 and summary["max_concurrency"] == 2 and summary["request_rate"] == "inf"
    assert summary["dataset_name"] == "random" and summary["model_id"] == "ttft=0.01;itl=0.002"
    assert summary["total_output_tokens"] == 32 and summary["total_input_tokens"] == 8 * 64
    assert summary["max_in_flight"] <= 2 and fake.max_in_flight <= 2
    assert summary["slo_attainment"] == 1.0
    assert len(fake.bodies) == 8


def test_warmups_go_first_and_are_left_out(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    """3 warm-ups then 8 timed requests: the server sees 11, the summary counts 8, and the warm-up
    prompts are other prompts (seed + 1), so none of the timed ones was sent before its turn."""
    args = bench_args(fake, "--workload", "random", "--isl", "32", "--osl", "3", "--num-prompts", "8")
    code, out, err = cli(capsys, *args, "--concurrency", "2", "--num-warmups", "3", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["num_warmups"] == 3
    assert summary["completed"] == 8 and summary["num_prompts"] == 8
    assert summary["total_output_tokens"] == 8 * 3
    assert len(fake.bodies) == 11
    warm, timed = fake.bodies[:3], fake.bodies[3:]
    assert all(len(b["prompt"]) == 32 and b["max_tokens"] == 3 for b in fake.bodies)
    assert not {tuple(b["prompt"]) for b in warm} & {tuple(b["prompt"]) for b in timed}
    assert fake.max_in_flight <= 2


def test_no_warmups_by_default(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    args = bench_args(fake, "--workload", "random", "--isl", "16", "--osl", "2", "--num-prompts", "4")
    code, out, err = cli(capsys, *args, "--concurrency", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["num_warmups"] == 0
    assert len(fake.bodies) == 4


def test_failed_warmups_stop_the_run_before_it_is_timed(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    args = bench_args(fake, "--workload", "random", "--isl", "16", "--osl", "2", "--num-prompts", "4", model="mode=500")
    code, out, err = cli(capsys, *args, "--concurrency", "2", "--num-warmups", "2")
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "--num-warmups: 2 of 2 warm-up requests failed" in err, err
    assert len(fake.bodies) == 2  # the timed requests were never sent


def test_output_file_and_table(capsys: pytest.CaptureFixture[str], fake: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    args = bench_args(fake, "--workload", "fresh", "--num-prompts", "5", "--request-rate", "50")
    code, out, err = cli(capsys, *args, "--output-file", str(path), "--endpoint", "chat")
    assert code == 0, err
    assert "completed" in out and "request_goodput" in out
    data = json.loads(path.read_text())
    assert data["completed"] == 5 and data["request_rate"] == 50.0 and data["max_concurrency"] is None
    assert data["backend"] == "openai-chat"
    assert len(data["requests"]) == 5 and len(data["ttfts"]) == 5 and len(data["itls"]) == 5
    assert all(r["error"] is None and r["ttft_ms"] > 0 for r in data["requests"])
    assert all("messages" in b for b in fake.bodies)


def test_trace_sessions_in_closed_loop(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    args = bench_args(fake, "--workload", f"trace:{TRACE}", "--num-prompts", "6", "--concurrency", "2", "--json")
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["completed"] == 6 and fake.max_in_flight <= 2
    a = [b["prompt"] for b in fake.bodies if len(b["prompt"]) in (140, 270, 330)]
    assert [len(p) for p in a] == [140, 270, 330]  # turns in order
    assert a[1][:140] == a[0] and a[2][:270] == a[1]  # each turn starts with the previous prompt


def test_unreachable_server_gives_failed_requests_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m", "--num-prompts", "3"]
    code, out, err = cli(capsys, *args, "--concurrency", "1", "--isl", "8", "--osl", "2", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["completed"] == 0 and summary["failed"] == 3 and len(summary["errors"]) == 3
    assert "ConnectError" in summary["errors"][0]
    code, out, err = cli(capsys, *args, "--concurrency", "1", "--isl", "8", "--osl", "2")
    assert code == 0 and "3 requests failed" in err


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--num-prompts", "0", "--concurrency", "1"], "--num-prompts"),
        (["--num-prompts", "2", "--concurrency", "0"], "--concurrency"),
        (["--num-prompts", "2", "--request-rate", "-1"], "--request-rate"),
        (["--num-prompts", "2"], "--concurrency"),
        (["--num-prompts", "2", "--concurrency", "1", "--endpoint", "responses"], "--endpoint"),
        (["--num-prompts", "2", "--concurrency", "1", "--workload", "nope"], "--workload"),
        (["--num-prompts", "2", "--concurrency", "1", "--timeout-s", "0"], "--timeout-s"),
        (["--num-prompts", "2", "--concurrency", "1", "--tokenizer-vocab", "1"], "--tokenizer-vocab"),
        (["--num-prompts", "2", "--concurrency", "1", "--slo-tpot-ms", "0"], "--slo-tpot-ms"),
        (["--num-prompts", "99", "--workload", f"trace:{TRACE}"], "--num-prompts"),
        (["--concurrency", "1"], "--num-prompts"),
        (["--num-prompts", "two"], "--num-prompts"),
        (["--num-prompts", "2", "--concurrency", "1", "--num-warmups", "-1"], "--num-warmups"),
        (["--num-prompts", "2", "--workload", f"trace:{TRACE}", "--num-warmups", "99"], "--num-warmups"),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], extra: list[str], flag: str) -> None:
    code, out, err = cli(capsys, "bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *extra)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error:") and flag in err, err


def test_bad_base_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(
        capsys, "bench", "--base-url", "127.0.0.1:8000", "--model", "m", "--num-prompts", "1", "--concurrency", "1"
    )
    assert code == 2 and err.count("\n") == 1 and "--base-url" in err


def test_session_workloads_are_cut_to_num_prompts() -> None:
    wl = _build_workload("agentic", 30, None, 4, 0, 1024, 1024, 1.0, 4)
    assert len(wl.requests) == 30 and len(wl.sessions()) >= 4 and wl.concurrency == 4
    wl = _build_workload("long-session", 10, 2.0, None, 0, 1024, 1024, 1.0, 4)
    assert len(wl.requests) == 10 and wl.concurrency is None
    assert [len(t) for t in wl.sessions().values()] == [4, 3, 3]
    wl = _build_workload("random", 5, float("inf"), None, 0, 64, 8, 1.0, 4)
    assert len(wl.requests) == 5 and wl.concurrency == 5  # rate inf: everything at t = 0
    wl = _build_workload("random", 6, 50.0, 2, 0, 64, 8, 1.0, 4)  # Poisson arrivals, at most 2 in flight
    assert wl.concurrency == 2 and all(r.arrival_s is not None for r in wl.requests)


def test_bench_checks_its_output_file_and_names_its_own_flag_before_any_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Found by fuzzing: an unwritable --output-file failed only after the whole run, and a huge
    --num-prompts was refused as --num-requests, a flag bench does not have."""
    base = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1"]
    code, _, err = cli(capsys, *base, "--num-prompts", "1", "--output-file", str(tmp_path / "no" / "o.json"))
    assert code == 2 and "--output-file" in err and "no such directory" in err
    code, _, err = cli(capsys, *base, "--num-prompts", "1000000000")
    assert code == 2 and "--num-prompts must be an integer from 1 to 1,000,000" in err


def test_a_failure_inside_the_clients_task_group_is_reported_as_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by fuzzing: a port out of range came back as "ExceptionGroup: unhandled errors in a
    TaskGroup (1 sub-exception)", which says nothing of what failed."""
    code, out, _ = cli(
        capsys,
        "bench",
        "--base-url",
        "http://127.0.0.1:99999",
        "--model",
        "m",
        "--num-prompts",
        "1",
        "--concurrency",
        "1",
        "--json",
    )
    errors = json.loads(out)["errors"]
    assert code == 0 and len(errors) == 1 and "ExceptionGroup" not in errors[0] and "port" in errors[0]


def _prompt_ids(fake: FakeServer) -> list[int]:
    return [t for body in fake.bodies for t in body["prompt"]]


def test_without_model_the_first_listed_model_is_benchmarked(
    capsys: pytest.CaptureFixture[str], fake: FakeServer
) -> None:
    """vLLM's bench client asks /v1/models when no model is named; so does tokenmill bench."""
    first = "ttft=0.001;itl=0.001"
    fake.models = {"object": "list", "data": [{"id": first, "object": "model"}, {"id": "other", "object": "model"}]}
    args = ["bench", "--base-url", fake.url, "--num-prompts", "3", "--concurrency", "1", "--isl", "8", "--osl", "2"]
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model_id"] == first and summary["completed"] == 3
    assert {b["model"] for b in fake.bodies} == {first}
    assert summary["tokenizer_vocab"] == 32_000  # the list reports no vocab_size: bench_serving's range


def test_the_vocabulary_the_server_reports_bounds_the_prompt_ids(
    capsys: pytest.CaptureFixture[str], fake: FakeServer
) -> None:
    model = "ttft=0.001;itl=0.001"
    fake.models = {"data": [{"id": "another", "vocab_size": 7}, {"id": model, "vocab_size": 50}]}
    base = bench_args(
        fake, "--num-prompts", "4", "--concurrency", "2", "--isl", "64", "--osl", "2", "--json", model=model
    )
    code, out, err = cli(capsys, *base)
    assert code == 0, err
    assert json.loads(out)["tokenizer_vocab"] == 50  # the named model's entry, not the first one's
    ids = _prompt_ids(fake)
    assert len(ids) == 4 * 64 and max(ids) < 50 and len(set(ids)) > 25
    fake.reset()
    fake.models = {"data": [{"id": model, "vocab_size": 50}]}
    code, out, err = cli(capsys, *base, "--tokenizer-vocab", "1000")  # the flag wins over the list
    assert code == 0 and json.loads(out)["tokenizer_vocab"] == 1000 and max(_prompt_ids(fake)) >= 50


@pytest.mark.parametrize(
    "models",
    [None, {"data": []}, {"data": "x"}, [1, 2], {"data": [{"id": ""}, {"name": "m"}]}],
    ids=["no route", "empty list", "not a list", "not an object", "no usable id"],
)
def test_without_model_a_server_that_lists_none_is_one_line(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, models: object
) -> None:
    fake.models = models
    args = ["bench", "--base-url", fake.url, "--num-prompts", "1", "--concurrency", "1"]
    code, out, err = cli(capsys, *args)
    assert code == 2 and out == "" and not fake.bodies
    assert err.count("\n") == 1 and err.startswith("error: --model not given") and "give --model NAME" in err, err


def test_without_model_an_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for url in (f"http://127.0.0.1:{free_port()}", "http://[::1"):
        code, _, err = cli(capsys, "bench", "--base-url", url, "--num-prompts", "1", "--concurrency", "1")
        assert code == 2 and err.count("\n") == 1 and "--model not given" in err and "/v1/models" in err, err


def test_bench_serving_flag_names_are_aliases(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    """--random-input-len, --random-output-len and --max-concurrency, as bench_serving spells them,
    run the same benchmark as --isl, --osl and --concurrency."""
    ours = bench_args(fake, "--num-prompts", "4", "--isl", "24", "--osl", "3", "--concurrency", "2", "--json")
    theirs = bench_args(
        fake, "--num-prompts", "4", "--random-input-len", "24", "--random-output-len", "3", "--max-concurrency", "2"
    )
    code, out, err = cli(capsys, *ours)
    assert code == 0, err
    sent = [b["prompt"] for b in fake.bodies]
    fake.reset()
    code, out2, err = cli(capsys, *theirs, "--json")
    assert code == 0, err
    assert [b["prompt"] for b in fake.bodies] == sent
    a, b = json.loads(out), json.loads(out2)
    assert (b["max_concurrency"], b["random_input_len"], b["random_output_len"]) == (2, 24, 3)
    assert b["total_output_tokens"] == a["total_output_tokens"] == 12
