"""`tokenmill bench` through the real entry point, against the fake server of the client tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from tests.cli_helpers import cli
from tests.workload.test_bench_client import FakeServer, free_port
from tokenmill.cli import bench_cmd
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
    sent = sorted(b["prompt"] for b in fake.bodies)  # sorted: with 2 in flight they arrive in either order
    fake.reset()
    code, out2, err = cli(capsys, *theirs, "--json")
    assert code == 0, err
    assert sorted(b["prompt"] for b in fake.bodies) == sent
    a, b = json.loads(out), json.loads(out2)
    assert (b["max_concurrency"], b["random_input_len"], b["random_output_len"]) == (2, 24, 3)
    assert b["total_output_tokens"] == a["total_output_tokens"] == 12


# ---------------------------------------------------------------- vLLM's flags, as InferenceX types them

#: A model name whose last "/" part (vLLM's model basename in --save-result's file name) is Kimi-K3;
#: the fake server reads its ttft/itl from it.
SLASHED_MODEL = "itl=0.002;ttft=0.01;org=acme/Kimi-K3"
DETAIL_KEYS = {"input_lens", "output_lens", "ttfts", "itls", "requests"}
#: The percentile keys every summary has, asked for or not.
FIXED_PERCENTILE_KEYS = {
    f"{s}_{m}_ms" for s in ("p90", "p95", "p99") for m in ("ttft", "tpot", "itl", "e2el", "e2e_latency")
}


def _percentile_keys(summary: dict[str, Any]) -> set[str]:
    return {k for k in summary if re.fullmatch(r"p[0-9.]+_[a-z0-9_]+_ms", k)}


def test_the_inferencex_command_line_runs_as_typed(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, tmp_path: Path
) -> None:
    """Reference §5.2's client line, word for word (plus vLLM's --metric-percentiles and
    --result-dir): it runs, saves under vLLM's file name, and the percentile keys it asks for are
    the per-request values' percentiles (numpy here, on the details the saved file carries)."""
    args = ["bench", "--base-url", fake.url, "--model", SLASHED_MODEL, "--dataset-name", "random"]
    args += ["--random-input-len", "32", "--random-output-len", "4", "--random-range-ratio", "1"]
    args += ["--num-prompts", "8", "--max-concurrency", "2", "--request-rate", "inf", "--ignore-eos"]
    args += ["--num-warmups", "4", "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result"]
    code, out, err = cli(capsys, *args, "--metric-percentiles", "50,99.9", "--result-dir", str(tmp_path), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert set(summary) >= RUN_KEYS | METRIC_KEYS
    assert summary["completed"] == 8 and summary["total_output_tokens"] == 32 and summary["burstiness"] == 1.0
    assert len(fake.bodies) == 12 and all(b["ignore_eos"] is True and b["min_tokens"] == 4 for b in fake.bodies)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and re.fullmatch(r"openai-infqps-concurrency2-Kimi-K3-\d{8}-\d{6}\.json", files[0].name)
    saved = json.loads(files[0].read_text())
    assert set(saved) == set(summary) | DETAIL_KEYS
    assert {k: saved[k] for k in summary} == summary
    wanted = {f"p{p}_{m}_ms" for p in ("50", "99.9") for m in ("ttft", "tpot", "itl", "e2el")}
    assert _percentile_keys(summary) == FIXED_PERCENTILE_KEYS | wanted
    ttft_ms = 1000 * np.array(saved["ttfts"])  # seconds, unrounded
    itl_ms = 1000 * np.array([gap for gaps in saved["itls"] for gap in gaps])
    tpot_ms = np.array([r["tpot_ms"] for r in saved["requests"]])  # rounded to 1 µs
    e2e_ms = np.array([r["e2e_ms"] for r in saved["requests"]])
    assert len(ttft_ms) == 8 and len(itl_ms) == 8 * 3 and min(ttft_ms) >= 9  # the fake's 10 ms TTFT
    for p, word in ((50, "50"), (99.9, "99.9")):
        assert summary[f"p{word}_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, p), rel=1e-9)
        assert summary[f"p{word}_itl_ms"] == pytest.approx(np.percentile(itl_ms, p), rel=1e-9)
        assert summary[f"p{word}_tpot_ms"] == pytest.approx(np.percentile(tpot_ms, p), abs=1e-3)
        assert summary[f"p{word}_e2el_ms"] == pytest.approx(np.percentile(e2e_ms, p), abs=1e-3)


def test_one_percentile_flag_alone_takes_vllms_default_for_the_other(
    capsys: pytest.CaptureFixture[str], fake: FakeServer
) -> None:
    base = bench_args(fake, "--num-prompts", "4", "--concurrency", "2", "--isl", "16", "--osl", "3", "--json")
    code, out, err = cli(capsys, *base, "--metric-percentiles", "75")
    assert code == 0, err
    summary = json.loads(out)  # vLLM's default metrics: ttft,tpot,itl (not e2el)
    assert _percentile_keys(summary) == FIXED_PERCENTILE_KEYS | {"p75_ttft_ms", "p75_tpot_ms", "p75_itl_ms"}
    assert all(summary[k] > 0 for k in ("p75_ttft_ms", "p75_tpot_ms", "p75_itl_ms"))
    code, out, err = cli(capsys, *base, "--percentile-metrics", "e2el")  # vLLM's default percentile: 99
    assert code == 0, err
    assert _percentile_keys(json.loads(out)) == FIXED_PERCENTILE_KEYS  # p99_e2el_ms is always there
    code, out, err = cli(capsys, *base)
    assert code == 0 and _percentile_keys(json.loads(out)) == FIXED_PERCENTILE_KEYS


def test_dataset_name_is_workload(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    base = bench_args(fake, "--num-prompts", "3", "--concurrency", "3", "--json")
    code, out, err = cli(capsys, *base, "--workload", "fresh")
    assert code == 0, err
    sent = sorted(b["prompt"] for b in fake.bodies)  # sorted: with 3 in flight they arrive in any order
    assert {len(p) for p in sent} != {1024}  # fresh prompts, not the default random 1,024-token ones
    fake.reset()
    code, out, err = cli(capsys, *base, "--dataset-name", "fresh")
    assert code == 0, err
    assert json.loads(out)["dataset_name"] == "fresh"
    assert sorted(b["prompt"] for b in fake.bodies) == sent


def test_ignore_eos_is_accepted_and_changes_nothing(capsys: pytest.CaptureFixture[str], fake: FakeServer) -> None:
    base = bench_args(fake, "--num-prompts", "3", "--concurrency", "1", "--isl", "8", "--osl", "5", "--json")
    code, _, err = cli(capsys, *base)
    assert code == 0, err
    without = list(fake.bodies)
    fake.reset()
    code, _, err = cli(capsys, *base, "--ignore-eos")
    assert code == 0, err
    assert fake.bodies == without
    assert all(b["ignore_eos"] is True and b["min_tokens"] == b["max_tokens"] == 5 for b in fake.bodies)
    code, _, _ = cli(capsys, *base, "--no-ignore-eos")  # it is always on: there is no off switch
    assert code == 2


def test_save_result_writes_what_output_file_writes(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, tmp_path: Path
) -> None:
    base = bench_args(fake, "--num-prompts", "4", "--concurrency", "2", "--isl", "16", "--osl", "3", "--json")
    code, _, err = cli(capsys, *base, "--output-file", str(tmp_path / "a.json"))
    assert code == 0, err
    code, _, err = cli(capsys, *base, "--save-result", "--result-dir", str(tmp_path), "--result-filename", "b.json")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert set(a) == set(b) and set(b) >= RUN_KEYS | METRIC_KEYS | DETAIL_KEYS
    same = ("input_lens", "output_lens", "num_prompts", "model_id", "completed", "total_output_tokens")
    assert all(a[k] == b[k] for k in same)
    assert [r["request_id"] for r in a["requests"]] == [r["request_id"] for r in b["requests"]]


def test_save_result_default_name_and_folder(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's name: backend, the rate as its float prints, no -concurrency part without a cap, the
    model's last path part, the time; in the current directory without --result-dir."""
    monkeypatch.chdir(tmp_path)
    args = ["bench", "--base-url", fake.url, "--model", SLASHED_MODEL, "--num-prompts", "3", "--isl", "8"]
    code, _, err = cli(capsys, *args, "--osl", "2", "--request-rate", "50", "--endpoint", "chat", "--save-result")
    assert code == 0, err
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and re.fullmatch(r"openai-chat-50\.0qps-Kimi-K3-\d{8}-\d{6}\.json", files[0].name)
    assert f"results saved to {files[0].name}" in err  # the table run says which file it wrote
    data = json.loads(files[0].read_text())
    assert data["backend"] == "openai-chat" and data["request_rate"] == 50.0 and data["max_concurrency"] is None


def test_build_workload_draws_gamma_gaps_with_burstiness() -> None:
    """4,000 gaps at 100 requests/s: coefficient of variation 1/√B (sample standard error < 0.015)."""
    for burstiness, cv in ((4.0, 0.5), (1.0, 1.0)):
        wl = _build_workload("random", 4_001, 100.0, None, 0, 8, 2, 1.0, 4, burstiness=burstiness)
        gaps = np.diff([r.arrival_s or 0.0 for r in wl.requests])
        got = float(np.std(gaps) / np.mean(gaps))
        assert abs(got - cv) < 0.04, f"CV {got:.4f} for --burstiness {burstiness}: want {cv} ± 0.04"
    plain = _build_workload("random", 50, 10.0, 2, 3, 8, 2, 1.0, 4)
    assert _build_workload("random", 50, 10.0, 2, 3, 8, 2, 1.0, 4, burstiness=1.0) == plain
    capped = _build_workload("random", 50, 10.0, 2, 3, 8, 2, 1.0, 4, burstiness=4.0)
    assert capped.concurrency == 2 and capped != plain


def test_burstiness_reaches_the_workload_and_the_summary(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []
    real = bench_cmd._build_workload

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("burstiness", 1.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_cmd, "_build_workload", spy)
    base = bench_args(fake, "--num-prompts", "4", "--isl", "8", "--osl", "2", "--request-rate", "1000", "--json")
    code, out, err = cli(capsys, *base, "--burstiness", "4")
    assert code == 0, err
    assert json.loads(out)["burstiness"] == 4.0 and seen == [4.0]
    code, out, err = cli(capsys, *base)
    assert code == 0, err
    assert json.loads(out)["burstiness"] == 1.0 and seen == [4.0, 1.0]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--percentile-metrics", "ttft,foo"], ["--percentile-metrics", "ttft,tpot,itl,e2el"]),
        (["--percentile-metrics", ""], ["--percentile-metrics"]),
        (["--percentile-metrics", "ttft,,itl"], ["--percentile-metrics"]),
        (["--percentile-metrics", "e2e_latency"], ["--percentile-metrics"]),
        (["--metric-percentiles", "0"], ["--metric-percentiles", "between 0 and 100"]),
        (["--metric-percentiles", "100"], ["--metric-percentiles"]),
        (["--metric-percentiles", "-1"], ["--metric-percentiles"]),
        (["--metric-percentiles", "nan"], ["--metric-percentiles"]),
        (["--metric-percentiles", "inf"], ["--metric-percentiles"]),
        (["--metric-percentiles", "p99"], ["--metric-percentiles"]),
        (["--metric-percentiles", ""], ["--metric-percentiles"]),
        (["--metric-percentiles", "50,,99"], ["--metric-percentiles"]),
        (["--request-rate", "10", "--burstiness", "0"], ["--burstiness", "finite number > 0"]),
        (["--request-rate", "10", "--burstiness", "-1"], ["--burstiness"]),
        (["--request-rate", "10", "--burstiness", "nan"], ["--burstiness"]),
        (["--request-rate", "10", "--burstiness", "inf"], ["--burstiness"]),
        (["--burstiness", "2"], ["--burstiness", "--request-rate"]),
        (["--burstiness", "1"], ["--burstiness", "--request-rate"]),
        (["--request-rate", "inf", "--burstiness", "2"], ["--burstiness", "--request-rate"]),
        (["--request-rate", "10", "--burstiness", "2", "--workload", "interference"], ["--burstiness", "--workload"]),
        (["--output-file", "o.json", "--save-result"], ["--output-file", "--save-result"]),
        (["--save-result", "--result-dir", "missing"], ["--result-dir", "no such directory"]),
        (["--result-dir", "."], ["--result-dir", "--save-result"]),
        (["--result-filename", "x.json"], ["--result-filename", "--save-result"]),
        (["--save-result", "--result-filename", "sub/x.json"], ["--result-filename"]),
        (["--save-result", "--result-filename", ".."], ["--result-filename"]),
        (["--dataset-name", "sharegpt"], ["--dataset-name", "random"]),
    ],
)
def test_bad_vllm_flags_exit_2_before_any_request(
    capsys: pytest.CaptureFixture[str],
    fake: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    named: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    base = bench_args(fake, "--num-prompts", "2", "--concurrency", "2", "--isl", "8", "--osl", "2")
    code, out, err = cli(capsys, *base, *extra)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error:") and all(n in err for n in named), err
    assert not fake.bodies and not list(tmp_path.iterdir())  # nothing sent, nothing written


def test_save_result_target_is_checked_whole_before_any_request(
    capsys: pytest.CaptureFixture[str], fake: FakeServer, tmp_path: Path
) -> None:
    """The name is known only once the model is: a file name that is a folder, or a model whose
    last path part makes the default name too long for the file system, is refused then, still
    before the first request rather than after the whole run."""
    (tmp_path / "taken").mkdir()
    base = bench_args(fake, "--num-prompts", "2", "--concurrency", "2", "--isl", "8", "--osl", "2")
    code, _, err = cli(capsys, *base, "--save-result", "--result-dir", str(tmp_path), "--result-filename", "taken")
    assert code == 2 and err.count("\n") == 1 and "--save-result" in err and "is a directory" in err, err
    long_model = "ttft=0.001;org=acme/" + "k" * 300
    args = bench_args(fake, "--num-prompts", "2", "--concurrency", "2", "--isl", "8", "--osl", "2", model=long_model)
    code, _, err = cli(capsys, *args, "--save-result", "--result-dir", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "--save-result" in err and "cannot write" in err, err
    assert not fake.bodies and [p.name for p in tmp_path.iterdir()] == ["taken"]
