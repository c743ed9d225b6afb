"""The pure helpers of benchmarks/bench_servers.py: JSON key comparison, the table, the run checks."""

from tests.cli_helpers import load_benchmark

bs = load_benchmark("bench_servers")


def test_key_paths_nested_objects_and_lists() -> None:
    obj = {"a": 1, "b": {"c": 2}, "rows": [{"x": 1}, {"y": None}], "itls": [[0.1]]}
    assert bs.key_paths(obj) == {"a", "b", "b.c", "rows", "rows[].x", "rows[].y", "itls"}


def test_key_diff_lists_each_side() -> None:
    a = {"completed": 1, "errors": [], "requests": [{"ttft_ms": 1.0, "chunks": 3}]}
    b = {"completed": 1, "goodput": 0.5, "requests": [{"ttft_ms": 2.0}]}
    assert bs.key_diff(a, b) == (["errors", "requests[].chunks"], ["goodput"])
    assert bs.key_diff(a, a) == ([], [])


def test_key_diff_ignores_values() -> None:
    assert bs.key_diff({"x": 1, "y": [1, 2]}, {"x": "one", "y": []}) == ([], [])


def test_side_by_side_ratio_and_missing_run() -> None:
    tm = {"completed": 64, "failed": 0, "output_throughput": 200.0, "mean_ttft_ms": 10.0, "slo_attainment": 1.0}
    vl = {"completed": 64, "failed": 0, "output_throughput": 100.0, "mean_ttft_ms": 20.0, "slo_attainment": 1.0}
    table = bs.side_by_side(tm, vl)
    assert table[0].startswith("| metric | tokenmill | vLLM |")
    assert "| completed / failed | 64 / 0 | 64 / 0 | |" in table
    assert "| output throughput (tok/s) | 200.0 | 100.0 | 2.00× |" in table
    assert "| mean TTFT (ms) | 10.0 | 20.0 | 0.50× |" in table
    assert "| request throughput (req/s) | – | – | – |" in table
    missing = bs.side_by_side(tm, None)
    assert "| output throughput (tok/s) | 200.0 | – | – |" in missing
    assert "| completed / failed | 64 / 0 | – | |" in missing


def test_sanity_flags_failures_and_wrong_lengths() -> None:
    good = {
        "completed": 4,
        "failed": 0,
        "errors": [],
        "total_input_tokens": 512,
        "total_output_tokens": 256,
        "max_in_flight": 2,
    }
    assert bs.sanity(good, 4, 128, 64, 2) == []
    bad = good | {"completed": 3, "failed": 1, "errors": ["r3: HTTP 400: bad"], "total_output_tokens": 190}
    problems = bs.sanity(bad, 4, 128, 64, 8)
    assert problems[0] == "completed 3, failed 1 of 4"
    assert problems[1] == "error: r3: HTTP 400: bad"
    assert "max_in_flight 2 != 4" in problems
    assert "total_input_tokens 512 != 3 × 128" in problems
    assert "total_output_tokens 190 != 3 × 64" in problems


def test_failed_requests_lines() -> None:
    details = {
        "requests": [
            {"request_id": "r0", "error": None},
            {
                "request_id": "r1",
                "error": "the stream carried no output",
                "output_tokens": 64,
                "expected_output_tokens": 64,
                "chunks": 0,
            },
        ]
    }
    assert bs.failed_requests(details) == [
        "r1: the stream carried no output; the server's usage: 64 output tokens (expected 64), 0 chunks with text"
    ]
    assert bs.failed_requests(None) == []
