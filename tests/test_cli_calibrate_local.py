"""`tokenmill calibrate local` through the real entry point, and `simulate` on the entry it writes.

Runs the real engine on the embedded default model (torch, a server on 127.0.0.1 and a
`tokenmill bench` subprocess): `--quick` keeps it to a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from tokenmill.cli import main
from tokenmill.cli.local_cmd import simulate_flags
from tokenmill.hardware import load_gpu
from tokenmill.perf.calibrated import local_params
from tokenmill.perf.local_fit import LOCAL_BOUNDS

SIM_ARGS = (
    "simulate",
    *[f for f in simulate_flags() if f not in ("--gpu", "cpu")],
    "--workload",
    "random",
    "--isl",
    "32",
    "--osl",
    "8",
    "--concurrency",
    "2",
    "--num-requests",
    "4",
    "--json",
)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out_dir = tmp_path_factory.mktemp("local")
    code, out, err = run_cli("calibrate", "local", "--quick", "--device", "cpu", "--out-dir", str(out_dir), "--json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    result["out_dir"] = out_dir
    return result


def test_writes_entry_params_and_steps(calibrated: dict[str, Any]) -> None:
    out_dir: Path = calibrated["out_dir"]
    assert Path(calibrated["entry"]) == out_dir / "cpu.toml"
    assert Path(calibrated["params"]) == out_dir / "cpu.perf.json"
    assert Path(calibrated["steps_csv"]) == out_dir / "cpu.steps.csv"
    for key in ("entry", "params", "steps_csv"):
        assert Path(calibrated[key]).is_file(), key
    assert calibrated["gemm_tflops"] > 0
    assert calibrated["memory_bandwidth_gb_s"] > 0
    assert calibrated["stream_per_token_s"] > 0
    assert calibrated["steps"] >= len(LOCAL_BOUNDS)
    assert set(calibrated["fitted"]) == set(LOCAL_BOUNDS)


def test_entry_and_params_read_back(calibrated: dict[str, Any]) -> None:
    gpu = load_gpu(calibrated["entry"])
    assert gpu.name == "cpu" and gpu.power_watts is None
    # the JSON rounds to 5 decimals of TFLOP/s and 3 of GB/s, the TOML to the same
    assert gpu.flops("bf16") / 1e12 == pytest.approx(calibrated["gemm_tflops"], abs=1e-5)
    assert gpu.hbm_bandwidth_bytes_per_s / 1e9 == pytest.approx(calibrated["memory_bandwidth_gb_s"], abs=0.01)
    got = local_params(calibrated["entry"])
    assert got is not None
    params = got[0]
    assert params.stream_per_token_s == pytest.approx(calibrated["stream_per_token_s"], rel=1e-5)
    for key, value in calibrated["fitted"].items():
        assert getattr(params, key) == pytest.approx(value, rel=1e-5), key


def test_steps_csv_has_one_row_per_fitted_step(calibrated: dict[str, Any]) -> None:
    lines = Path(calibrated["steps_csv"]).read_text().strip().splitlines()
    assert lines[0].split(",")[-2:] == ["measured_ms", "predicted_ms"]
    assert len(lines) - 1 == calibrated["steps"]
    for line in lines[1:]:
        measured, predicted = (float(x) for x in line.split(",")[-2:])
        assert measured > 0 and predicted > 0


def test_simulate_on_the_entry_uses_its_fit(calibrated: dict[str, Any], tmp_path: Path) -> None:
    code, out, err = run_cli(*SIM_ARGS[:1], "--gpu", calibrated["entry"], *SIM_ARGS[1:])
    assert code == 0, err
    local = json.loads(out)
    assert local["completed"] == 4 and local["failed"] == 0
    assert local["mean_tpot_ms"] > 0
    # the same entry without its fitted constants: the priors, so another TPOT
    bare = tmp_path / "cpu.toml"
    shutil.copy(calibrated["entry"], bare)
    code, out, err = run_cli(*SIM_ARGS[:1], "--gpu", str(bare), *SIM_ARGS[1:])
    assert code == 0, err
    assert json.loads(out)["mean_tpot_ms"] != local["mean_tpot_ms"]


def test_bad_backend_is_one_line_exit_2(calibrated: dict[str, Any]) -> None:
    code, out, err = run_cli(*SIM_ARGS[:1], "--gpu", calibrated["entry"], *SIM_ARGS[1:], "--backend", "nope")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--backend" in lines[0] and "nope" in lines[0]


def test_bundled_name_is_refused(tmp_path: Path) -> None:
    code, _, err = run_cli("calibrate", "local", "--quick", "--name", "h200", "--out-dir", str(tmp_path))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "h200" in err
    assert not list(tmp_path.iterdir())


GPU = __import__("torch").cuda.is_available()


@pytest.mark.skipif(GPU, reason="this machine has a GPU")
def test_a_gpu_that_is_not_there_is_one_line_and_nothing_written(tmp_path: Path) -> None:
    code, out, err = run_cli("calibrate", "local", "--quick", "--device", "cuda", "--out-dir", str(tmp_path))
    assert code == 2 and out == ""
    said = "error: --device cuda: torch sees no CUDA device here; use --device cpu (or auto)"
    assert err.strip().splitlines() == [said]
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not GPU, reason="needs a GPU")
def test_on_a_gpu_the_entry_is_the_gpu(tmp_path: Path) -> None:
    import torch

    code, out, err = run_cli("calibrate", "local", "--quick", "--device", "cuda", "--out-dir", str(tmp_path), "--json")
    assert code == 0, err
    result = json.loads(out)
    gpu = load_gpu(result["entry"])
    props = torch.cuda.get_device_properties(0)
    assert gpu.name == "cuda" and result["device"] == "cuda" and gpu.display_name == props.name
    assert gpu.architecture == f"sm_{props.major}{props.minor}" and gpu.vendor in ("nvidia", "amd")
    assert gpu.memory_visible_bytes == props.total_memory // 2**20 * 2**20
    # a GPU's copy and GEMM are far beyond any CPU's: > 500 GB/s and > 20 TFLOP/s in bf16
    assert gpu.hbm_bandwidth_bytes_per_s > 500e9 and gpu.flops("bf16") > 20e12
    assert "--device cuda" in Path(result["entry"]).read_text()
