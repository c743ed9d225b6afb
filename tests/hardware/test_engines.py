"""Which engines run on which GPUs: TensorRT-LLM on NVIDIA's only, refused elsewhere in one line by
every command that takes an engine and a GPU (and skipped, with the reason, as a measurement row)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli
from tests.perf.rows import MODELS, row
from tokenmill.errors import TokenmillError
from tokenmill.hardware import known_gpu_names, load_gpu
from tokenmill.hardware.engines import ENGINES, check_engine_runs_on, runs_on
from tokenmill.perf.measurements import Skip, interpret
from tokenmill.perf.replay import engine_policy
from tokenmill.plan.layout import Layout


def test_tensorrt_llm_runs_on_nvidia_gpus_only_and_the_others_everywhere() -> None:
    vendors = {name: load_gpu(name).vendor for name in known_gpu_names()}
    assert vendors["mi355x"] == "amd" and vendors["h200"] == "nvidia"
    for name, vendor in vendors.items():
        assert runs_on("trtllm", vendor) == (vendor == "nvidia"), name
        assert runs_on("sglang", vendor) and runs_on("vllm", vendor) and runs_on("tokenmill", vendor)
    assert not runs_on("TRTLLM", "cpu") and runs_on(" TRTLLM ", "NVIDIA")


def test_the_refusal_names_the_flag_the_vendors_and_the_engines_that_do_run() -> None:
    with pytest.raises(TokenmillError) as exc:
        check_engine_runs_on("trtllm", load_gpu("mi355x"), "--backend")
    assert str(exc.value) == (
        "--backend trtllm runs on nvidia GPUs only, and mi355x is amd's (engines that run on it: sglang, vllm)"
    )
    for engine in ENGINES:
        check_engine_runs_on(engine, load_gpu("b300"))  # every engine on an NVIDIA GPU


def test_the_replay_refuses_it_before_any_step() -> None:
    with pytest.raises(TokenmillError, match="trtllm runs on nvidia GPUs only"):
        engine_policy("trtllm", load_gpu("mi355x"), Layout(tp=8))
    assert engine_policy("vllm", load_gpu("mi355x"), Layout(tp=8)).backend == "vllm"


def test_a_measurement_row_of_trtllm_on_an_amd_gpu_is_skipped_with_the_reason() -> None:
    skip = interpret(row(backend="trtllm", system="mi355x"), MODELS)
    assert isinstance(skip, Skip)
    assert skip.reason.startswith("backend trtllm runs on nvidia GPUs only, and mi355x is amd's")
    assert not isinstance(interpret(row(backend="vllm", system="mi355x"), MODELS), Skip)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["predict", "--model", "llama-3.1-8b", "--gpu", "mi355x", "--gpus", "1", "--backend", "trtllm"], "--backend"),
        (["simulate", "--model", "llama-3.1-8b", "--gpu", "mi355x", "--gpus", "1", "--backend", "trtllm"], "--backend"),
        (["sweep", "--model", "llama-3.1-8b", "--gpu", "mi355x", "--gpus", "1", "--backend", "trtllm"], "--backend"),
        (["plan", "--gpu", "mi355x", "--launch", "trtllm-serve meta-llama/Llama-3.1-8B"], "--launch: engine"),
        (
            ["predict", "--gpu", "mi355x", "--launch", "trtllm-serve meta-llama/Llama-3.1-8B --tp_size 1"],
            "--launch: engine",
        ),
    ],
)
def test_every_command_refuses_it_in_one_line(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *argv)
    assert code != 0 and out == ""
    assert err.strip().splitlines() == [
        f"error: {flag} trtllm runs on nvidia GPUs only, and mi355x is amd's (engines that run on it: sglang, vllm)"
    ]


def test_calibrate_record_refuses_it_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine.csv"
    code, _, err = cli(
        capsys,
        "calibrate", "record", "--measured", str(tmp_path / "none.json"),
        "--launch", "trtllm-serve meta-llama/Llama-3.1-8B", "--gpu", "mi355x", "--out", str(out),
    )  # fmt: skip
    assert code != 0 and "--launch: engine trtllm runs on nvidia GPUs only" in err
    assert not out.exists()
