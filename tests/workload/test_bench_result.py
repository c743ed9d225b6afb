"""A benchmark result file read back as the closed-loop point it measured (`predict --measured`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cli_helpers import cli, cli_json
from tokenmill.errors import TokenmillError
from tokenmill.workload.bench_result import read_bench_result

#: What vLLM's `bench serve --save-result` writes for a closed loop (keys of the reference §6.2;
#: it records totals, not the random lengths it was given).
VLLM = {
    "date": "20261205-040000",
    "backend": "vllm",
    "model_id": "Qwen/Qwen3-32B",
    "num_prompts": 160,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 16,
    "duration": 52.1,
    "completed": 160,
    "total_input_tokens": 163_840,
    "total_output_tokens": 40_960,
    "mean_ttft_ms": 212.5,
    "mean_tpot_ms": 19.75,
}
#: SGLang's `bench_serving --output-file` line: it has the random lengths and the range ratio.
SGLANG = {
    "backend": "sglang",
    "dataset_name": "random",
    "request_rate": float("inf"),
    "max_concurrency": 4,
    "random_input_len": 8192,
    "random_output_len": 1024,
    "random_range_ratio": 1.0,
    "completed": 40,
    "total_input_tokens": 327_680,
    "total_output_tokens": 40_960,
    "mean_ttft_ms": 446.91,
    "mean_tpot_ms": 11.27,
}


def write(tmp_path: Path, obj: Any, name: str = "r.json") -> Path:
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def test_fixed_lengths_need_no_totals(tmp_path: Path) -> None:
    trimmed = {k: v for k, v in SGLANG.items() if not k.startswith("total_")}
    assert read_bench_result(write(tmp_path, trimmed)).isl == 8192
    with pytest.raises(TokenmillError, match="total_input_tokens must be a number"):
        read_bench_result(write(tmp_path, {k: v for k, v in VLLM.items() if k != "total_input_tokens"}))


def test_vllms_result_gives_its_mean_lengths(tmp_path: Path) -> None:
    point = read_bench_result(write(tmp_path, VLLM))
    assert (point.isl, point.osl, point.concurrency) == (1024, 256, 16)  # 163,840 / 160 and 40,960 / 160
    assert (point.ttft_ms, point.tpot_ms, point.completed) == (212.5, 19.75, 160)
    assert any("mean of the completed requests" in n for n in point.notes)


def test_sglangs_json_lines_give_the_last_run(tmp_path: Path) -> None:
    older = SGLANG | {"max_concurrency": 2, "mean_ttft_ms": 300.0}
    text = json.dumps(older) + "\n" + json.dumps(SGLANG).replace("Infinity", "Infinity") + "\n"
    point = read_bench_result(write(tmp_path, text, "runs.jsonl"))
    assert (point.isl, point.osl, point.concurrency, point.ttft_ms) == (8192, 1024, 4, 446.91)
    assert "the last of the file's 2 runs" in point.notes


def test_tokenmill_benchs_own_file_reads_back(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The file `tokenmill bench --output-file` writes, against the client tests' fake server."""
    pytest.importorskip("httpx")
    from tests.workload.test_bench_client import FakeServer

    server = FakeServer().start()
    try:
        out = tmp_path / "bench.json"
        code, _, err = cli(
            capsys,
            *("bench", "--base-url", server.url, "--model", "ttft=0.005;itl=0.001", "--num-prompts", "6"),
            *("--concurrency", "3", "--isl", "40", "--osl", "5", "--output-file", str(out), "--json"),
        )
        assert code == 0, err
    finally:
        server.stop()
    saved = json.loads(out.read_text())
    point = read_bench_result(out)
    assert (point.isl, point.osl, point.concurrency, point.completed) == (40, 5, 3, 6)
    assert point.ttft_ms == saved["mean_ttft_ms"] and point.tpot_ms == saved["mean_tpot_ms"] and point.notes == ()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"request_rate": 4.0}, "open loop"),
        ({"max_concurrency": None}, "max_concurrency must be a positive integer"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive integer"),
        ({"completed": 0}, "no request completed"),
        ({"mean_ttft_ms": "fast"}, "mean_ttft_ms must be a number"),
        ({"mean_tpot_ms": float("nan")}, "mean_tpot_ms must be a number"),
        ({"total_input_tokens": -1}, "total_input_tokens must be a number"),
        ({"random_input_len": 0}, "random_input_len must be a positive integer"),
    ],
)
def test_a_file_that_is_not_a_closed_loop_point_is_one_line(tmp_path: Path, change: dict[str, Any], says: str) -> None:
    with pytest.raises(TokenmillError, match=says) as exc:
        read_bench_result(write(tmp_path, SGLANG | change))
    assert "\n" not in str(exc.value) and "--measured" in str(exc.value)


@pytest.mark.parametrize(("text", "says"), [("[1, 2]", "one JSON object"), ("{oops", "neither JSON"), ("", "one JSON")])
def test_a_file_that_is_not_json_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(TokenmillError, match=says):
        read_bench_result(write(tmp_path, text))
    with pytest.raises(TokenmillError, match="No such file"):
        read_bench_result(tmp_path / "missing.json")


@given(
    st.dictionaries(st.sampled_from([*sorted(SGLANG), "failed"]), st.none() | st.integers() | st.floats() | st.text())
)
@settings(max_examples=200)
def test_any_mutation_is_read_or_refused_in_one_line(change: dict[str, Any]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.json"
        path.write_text(json.dumps(SGLANG | change))
        try:
            point = read_bench_result(path)
        except TokenmillError as exc:
            assert "\n" not in str(exc)
        else:
            assert point.isl >= 1 and point.osl >= 1 and point.concurrency >= 1


PREDICT = ("predict", "--model", "qwen3-32b", "--gpu", "h100", "--gpus", "2", "--backend", "vllm", "--json")


def test_predict_measured_is_the_prediction_of_the_files_point(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same prediction as the point given by hand, with the measurement and the signed errors
    beside it (the ratio worked out here from the two runs' numbers)."""
    path = write(tmp_path, VLLM)
    by_hand = cli_json(capsys, *PREDICT, "--isl", "1024", "--osl", "256", "--concurrency", "16")
    got = cli_json(capsys, *PREDICT, "--measured", str(path))
    measured = got.pop("measured")
    assert got == by_hand
    assert measured["ttft_ms"] == 212.5 and measured["tpot_ms"] == 19.75 and measured["completed"] == 160
    assert measured["ttft_error"] == pytest.approx(by_hand["ttft_ms"] / 212.5 - 1, abs=1e-4)
    assert measured["tpot_error"] == pytest.approx(by_hand["tpot_ms"] / 19.75 - 1, abs=1e-4)
    low, high = by_hand["accuracy"]["ttft_ms_range_80"]
    assert measured["ttft_in_band"] == (low <= 212.5 <= high)
    code, out, err = cli(capsys, *PREDICT[:-1], "--measured", str(path))
    assert code == 0, err
    assert (
        f"measured ({path}, 160 requests at concurrency 16): TTFT 212.5 ms (predicted {measured['ttft_error']:+.1%}"
        in out
    )
    assert measured["output_throughput_per_gpu"] is None  # vLLM's file as written above has no output_throughput


def test_predict_measured_sweep_is_the_curve_at_the_files_points(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Three files of one sweep (given out of order): the curve at their concurrencies, each point
    with its own measurement, and the figure drawn with them."""
    files = []
    for conc, ttft, tpot, tput in ((64, 900.0, 30.0, 2000.0), (1, 80.0, 15.0, 60.0), (16, 212.5, 19.75, 786.0)):
        run = VLLM | {"max_concurrency": conc, "mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "output_throughput": tput}
        files += ["--measured", str(write(tmp_path, run, f"c{conc}.json"))]
    by_hand = cli_json(capsys, *PREDICT, "--isl", "1024", "--osl", "256", "--concurrency", "1,16,64")
    figure = tmp_path / "curve.png"
    got = cli_json(capsys, *PREDICT, *files, "--figure", str(figure))
    assert [p["concurrency"] for p in got["points"]] == [1, 16, 64] and figure.stat().st_size > 10_000
    for point, hand, (ttft, tput) in zip(
        got["points"], by_hand["points"], ((80.0, 60.0), (212.5, 786.0), (900.0, 2000.0)), strict=True
    ):
        m = point.pop("measured")
        assert point == hand
        assert m["ttft_ms"] == ttft and m["ttft_error"] == pytest.approx(hand["ttft_ms"] / ttft - 1, abs=1e-4)
        assert m["output_throughput_per_gpu"] == pytest.approx(tput / 2)  # over the deployment's 2 GPUs
    other = VLLM | {"total_input_tokens": 2 * 163_840}
    code, _, err = cli(capsys, *PREDICT, *files[:2], "--measured", str(write(tmp_path, other, "long.json")))
    assert code == 2 and "share ISL and OSL" in err and err.count("\n") == 1
    code, _, err = cli(capsys, *PREDICT, *files[:2], *files[:2])
    assert code == 2 and "both ran 64 lanes" in err and err.count("\n") == 1
    same = cli_json(capsys, *PREDICT, *files, "--concurrency", "64,1,16")
    assert [p["concurrency"] for p in same["points"]] == [1, 16, 64]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--isl", "2048"], "--isl 2048 disagrees with --measured, which ran 1024"),
        (["--concurrency", "1,16"], "--concurrency 1,16 disagrees with --measured"),
        (["--compare", "tp=1,gpus=1"], "--measured is of one deployment"),
    ],
)
def test_predict_measured_refuses_another_point(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], says: str
) -> None:
    code, out, err = cli(capsys, *PREDICT, "--measured", str(write(tmp_path, VLLM)), *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err
    same = cli_json(capsys, *PREDICT, "--measured", str(write(tmp_path, VLLM)), "--isl", "1024", "--osl", "256")
    assert same["isl"] == 1024 and "measured" in same  # the same point given twice is no conflict


def test_a_json_lines_sweep_is_every_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """SGLang appends a run a line: `--measured` takes each line as a point (the line named in
    its source), and `calibrate record` writes a row each."""
    lines = [SGLANG | {"max_concurrency": c, "mean_ttft_ms": 100.0 * c} for c in (4, 1, 16)]
    path = write(tmp_path, "\n".join(json.dumps(x) for x in lines) + "\n", "sweep.jsonl")
    from tokenmill.workload.bench_result import read_bench_results

    runs = read_bench_results(path)
    assert [(r.concurrency, r.ttft_ms, r.source) for r in runs] == [
        (4, 400.0, f"{path}:1"),
        (1, 100.0, f"{path}:2"),
        (16, 1600.0, f"{path}:3"),
    ]
    args = ("predict", "--model", "deepseek-r1", "--gpu", "h200", "--backend", "sglang", "--json")
    curve = cli_json(capsys, *args, "--measured", str(path))
    assert [(p["concurrency"], p["measured"]["ttft_ms"]) for p in curve["points"]] == [
        (1, 100.0),
        (4, 400.0),
        (16, 1600.0),
    ]
    out = tmp_path / "mine.csv"
    launch = "sglang serve --model-path deepseek-ai/DeepSeek-R1 --tp-size 8"
    record = ["calibrate", "record", "--launch", launch, "--gpu", "h200", "--out", str(out)]
    code, printed, err = cli(capsys, *record, "--measured", str(path))
    assert code == 0 and printed.count("\n") == 3, err
    twice = write(tmp_path, "\n".join(json.dumps(x) for x in [*lines, lines[0]]), "again.jsonl")
    code, _, err = cli(capsys, *record[:-1], str(tmp_path / "other.csv"), "--measured", str(twice))
    assert code == 2 and f"{twice}:1" in err and f"{twice}:4" in err and "keep one" in err
    code, _, err = cli(capsys, *args, "--measured", str(twice))
    assert code == 2 and "both ran 4 lanes" in err
