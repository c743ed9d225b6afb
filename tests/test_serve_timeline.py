"""benchmarks/serve_timeline.py: the medians and the step overlap against timelines worked by hand,
and one short live run on this CPU whose hand-offs must come in order on one clock."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
st = load_benchmark("serve_timeline")


def _request(t0: float, marks_ms: dict[str, float], tpot_ms: float, osl: int = 64) -> dict[str, float]:
    r: dict[str, float] = {"send": t0, **{k: t0 + v / 1000 for k, v in marks_ms.items()}, "osl": osl}
    r["done"] = r["first"] + (osl - 1) * tpot_ms / 1000
    return r


# Two requests at one lane. Request 1: prefill step 3–13 ms, then a decode step 13–21 ms, of which
# 2 ms fall inside its push → body (13–15 ms). Request 2 (sent at 1 s): prefill 5–25 ms, decode
# 25–33 ms, 5 ms of it inside push → body (25–30 ms).
R1 = _request(0.0, {"http": 1, "submit": 2, "intake": 3, "push": 13, "loop": 14, "body": 15, "first": 16}, 8.0)
R2 = _request(1.0, {"http": 3, "submit": 4, "intake": 5, "push": 25, "loop": 26, "body": 30, "first": 31}, 8.0)
STEPS = [
    {"start": 0.003, "end": 0.013, "prefills": 1, "decodes": 0},
    {"start": 0.013, "end": 0.021, "prefills": 0, "decodes": 1},
    {"start": 1.005, "end": 1.025, "prefills": 1, "decodes": 0},
    {"start": 1.025, "end": 1.033, "prefills": 0, "decodes": 1},
]


def test_summary_medians_worked_by_hand() -> None:
    s = st._summarize([R1, R2, {"send": 2.0, "http": 2.001}], STEPS)  # the third lacks marks: left out
    assert s["requests"] == 2
    m = s["median_ms"]
    assert m["ttft"] == pytest.approx((16 + 31) / 2)
    assert m["send→http"] == pytest.approx((1 + 3) / 2)
    assert m["intake→push"] == pytest.approx((10 + 20) / 2)
    assert m["loop→body"] == pytest.approx((1 + 4) / 2)
    assert s["steps_inside_push_to_body_ms"] == pytest.approx((2 + 5) / 2)
    assert s["prefill_only_step_ms"] == pytest.approx((10 + 20) / 2)
    assert s["decode_only_step_ms"] == pytest.approx(8.0)
    assert s["tpot_ms"] == pytest.approx(8.0)


def test_table_has_a_row_per_variant_and_load() -> None:
    res = {"variant": "off", "by_lanes": {"1": st._summarize([R1, R2], STEPS)}}
    lines = st._table([res, {**res, "variant": "on"}]).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| off | 1 | 23.50 |")
    assert lines[3].startswith("| on | 1 | 23.50 |")


def test_unknown_variant_is_one_error() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "serve_timeline.py"), "--variant", "maybe", "--out", "/nonexistent"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert "--variant: each must be off or on (got 'maybe')" in out.stderr


def test_live_run_hand_offs_in_order(tmp_path: Path) -> None:
    """The probe patches the server's hand-offs by name: a renamed one would leave a mark out."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "serve_timeline.py"), "--concurrency", "1"]
    cmd += ["--num-prompts", "3", "--osl", "4", "--variant", "off,on", "--out", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads((tmp_path / "serve_timeline.json").read_text())
    assert [r["variant"] for r in data["results"]] == ["off", "on"]
    for res in data["results"]:
        reqs = [r for r in res["requests"] if r["lanes"] == 1]
        assert len(reqs) == 3
        for r in reqs:
            times = [r[m] for m in st.MARKS]
            assert times == sorted(times), r
        assert res["by_lanes"]["1"]["requests"] == 3
        assert any(s["prefills"] for s in res["steps"]) and any(s["decodes"] for s in res["steps"])
    assert not list(tmp_path.glob("*.server.json"))  # the servers' records are folded in, then removed
