"""Layout flags in combination: ``plan`` and ``predict`` given random sets of parallel sizes,
formats, pools and speculation over the bundled models and GPUs answer with a result (valid JSON
under ``--json``) or one line naming what is wrong, exit code 2, never a traceback. Each flag's odd
values alone are ``test_cli_numbers``'s; what this adds is their interactions (DCP against
attention DP, a drafter against a pool ratio, a disaggregated decode layout against its GPUs),
where a check one flag passes can leave another's arithmetic dividing by zero."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_helpers import answers_or_one_line
from tokenmill.hardware.catalog import known_gpu_names
from tokenmill.spec.presets import PRESETS

#: every bundled model and GPU, so a new preset or catalog entry is covered the day it is added
MODELS = tuple(PRESETS)
GPUS = tuple(known_gpu_names())

#: layout keys and values, each also a ``--decode-layout``/``--compare`` KEY=V
LAYOUT = {
    "tp": ("1", "2", "3", "4", "8", "16"),
    "ep": ("1", "2", "4", "8", "16"),
    "pp": ("1", "2", "4"),
    "dp-attention": ("1", "2", "4", "8"),
    "dcp": ("1", "2", "4", "8"),
    "speculative": ("none", "mtp:1", "mtp:3", "dspark:7"),
    "kv-cache-dtype": ("auto", "bf16", "fp8_e4m3"),
    "page-size": ("1", "16", "64"),
    "max-running-requests": ("1", "8", "1000"),
    "pool-ratio": ("0.1", "1.1", "8.82"),
    "avg-request-tokens": ("1000", "100000"),
    "mem-fraction-static": ("0.5", "0.85", "0.95"),
    "moe-a2a-backend": ("none", "deepep", "megamoe"),
    "prefix-cache": ("extra_buffer", "extra_buffer_lazy", "no_buffer", "off"),
}

layouts = st.dictionaries(st.sampled_from(sorted(LAYOUT)), st.none(), max_size=5).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(LAYOUT[k]) for k in keys})
)


def deployment(draw: st.DrawFn) -> list[str]:
    argv = ["--model", draw(st.sampled_from(MODELS)), "--gpu", draw(st.sampled_from(GPUS))]
    argv += ["--gpus", draw(st.sampled_from(("1", "2", "4", "8", "16", "32")))]
    for key, value in draw(layouts).items():
        argv += [f"--{key}", value]
    if draw(st.booleans()):
        argv += ["--expert-format", draw(st.sampled_from(("mxfp4", "nvfp4", "fp8", "bf16")))]
    if draw(st.integers(0, 3)) == 0:
        argv += ["--weight-format", draw(st.sampled_from(("bf16", "fp8", "fp8_block", "nvfp4")))]
    if draw(st.integers(0, 9)) == 0:
        argv.append("--replayssm")
    return argv


@st.composite
def plans(draw: st.DrawFn) -> list[str]:
    return ["plan", *deployment(draw), "--json"]


def pairs(layout: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in layout.items())


@st.composite
def predictions(draw: st.DrawFn) -> list[str]:
    argv = ["predict", *deployment(draw)]
    argv += ["--isl", draw(st.sampled_from(("16", "1000", "8192"))), "--osl", draw(st.sampled_from(("1", "16", "256")))]
    argv += ["--concurrency", draw(st.sampled_from(("1", "4", "16", "1,8")))]
    argv += ["--backend", draw(st.sampled_from(("sglang", "vllm", "trtllm")))]
    if draw(st.booleans()):
        workers = st.sampled_from(("1", "2"))
        argv += ["--decode-workers", draw(workers), "--prefill-workers", draw(workers)]
        if draw(st.booleans()):
            argv += ["--decode-gpus", draw(st.sampled_from(("4", "8", "16")))]
        decode = draw(layouts)
        if decode:
            argv += ["--decode-layout", pairs(decode)]
    elif draw(st.integers(0, 3)) == 0:
        argv += ["--compare", pairs(draw(layouts)) or "tp=8"]
    return [*argv, "--json"]


def answers_json_or_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = answers_or_one_line(argv, "error: ", capsys)
    if code == 0:
        assert isinstance(json.loads(out), dict), out[:200]


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=plans())
def test_a_plan_of_any_flags_is_an_answer_or_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    answers_json_or_one_line(argv, capsys)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=predictions())
def test_a_prediction_of_any_flags_is_an_answer_or_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    answers_json_or_one_line(argv, capsys)
