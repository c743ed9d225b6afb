"""Constants fitted by ``tokenmill calibrate local``: stored beside the entry, read back, and which
constants a simulation uses (``resolve_params``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.perf.machines import measured_cpu
from tokenmill.errors import TokenmillError
from tokenmill.hardware.local import write_entry
from tokenmill.perf import PerfParams
from tokenmill.perf.calibrated import (
    local_params,
    local_params_path,
    resolve_params,
    shipped_path,
    write_local_params,
)
from tokenmill.perf.params import ENGINE_FIELDS

LOCAL = PerfParams(
    matmul_efficiency=0.05,
    attention_efficiency=0.9,
    step_overhead_s=3e-3,
    sampling_per_token_s=2.8e-5,
    stream_per_token_s=6.5e-5,
)
META = {"measured_at": "2026-01-02T03:04:05Z", "command": "tokenmill calibrate local --quick"}


@pytest.fixture
def hw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path))
    folder = tmp_path / "hardware"
    folder.mkdir()
    return folder


@pytest.fixture
def shipped() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(shipped_path().read_text())
    return data


def write_cpu_entry(folder: Path) -> None:
    write_entry(measured_cpu(8 * 1024**3), folder)


def test_paths_sit_beside_the_entry(hw: Path, tmp_path: Path) -> None:
    assert local_params_path("cpu") == hw / "cpu.perf.json"
    assert local_params_path(" CPU ") == hw / "cpu.perf.json"
    assert local_params_path(str(tmp_path / "out" / "box.toml")) == tmp_path / "out" / "box.perf.json"
    assert local_params_path("out/box") == Path("out/box.perf.json")


def test_round_trip(hw: Path) -> None:
    path = local_params_path("cpu")
    write_local_params(path, LOCAL, META)
    assert not list(hw.glob("*.tmp"))
    raw = json.loads(path.read_text())
    assert raw["meta"] == META and raw["params"]["stream_per_token_s"] == 6.5e-5
    got = local_params("cpu")
    assert got is not None
    params, notes = got
    assert params == LOCAL
    assert len(notes) == 1 and "calibrate local" in notes[0] and "2026-01-02T03:04:05Z" in notes[0]


@given(
    values=st.fixed_dictionaries(
        {},
        optional={
            "matmul_efficiency": st.floats(min_value=1e-3, max_value=1.0),
            "step_overhead_s": st.floats(min_value=1e-6, max_value=0.1),
            "stream_per_token_s": st.floats(min_value=0.0, max_value=1e-3),
            "sampling_per_token_s": st.floats(min_value=1e-8, max_value=1e-2),
        },
    )
)
def test_round_trip_is_exact_for_any_values(values: dict[str, float], tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("params")
    path = folder / "box.perf.json"
    write_local_params(path, PerfParams(**values), {})
    got = local_params(str(folder / "box.toml"))
    assert got is not None
    assert got[0] == PerfParams(**values)
    assert "(?)" in got[1][0]  # no measured_at in meta


def test_absent_file_is_none(hw: Path) -> None:
    assert local_params("cpu") is None
    assert local_params(str(hw / "nothing.toml")) is None


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ('{"params": {"matmul_efficiency": 0.1,}', ("not valid JSON", "line 1")),
        ('{"params": {"matmul_eficiency": 0.1}}', ("'matmul_eficiency'", "unknown parameter")),
        ('{"params": {"step_overhead_s": -1e-3}}', ("params.step_overhead_s", "positive number")),
        ('{"params": {"matmul_efficiency": 0}}', ("params.matmul_efficiency", "positive number")),
        ('{"params": {"stream_per_token_s": -1e-4}}', ("params.stream_per_token_s", ">= 0")),
        ('{"params": {"stream_per_token_s": "fast"}}', ("params.stream_per_token_s",)),
        ('{"params": {"overhead_scale": true}}', ("params.overhead_scale",)),
        ('{"params": {"overhead_scale": null}}', ("params.overhead_scale",)),
        ('{"params": [0.1]}', ("'params' must be an object",)),
        ('{"meta": {}}', ("'params' must be an object",)),
        ("[]", ("'params' must be an object",)),
    ],
)
def test_bad_file_is_one_line_error_naming_file_and_key(hw: Path, body: str, needles: tuple[str, ...]) -> None:
    path = hw / "cpu.perf.json"
    path.write_text(body)
    with pytest.raises(TokenmillError) as exc:
        local_params("cpu")
    message = str(exc.value)
    assert str(path) in message and "\n" not in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_non_finite_value_is_an_error(hw: Path, value: str) -> None:
    (hw / "cpu.perf.json").write_text(f'{{"params": {{"matmul_efficiency": {value}}}}}')
    with pytest.raises(TokenmillError, match="matmul_efficiency"):
        local_params("cpu")


def test_meta_not_an_object_is_a_tokenmill_error(hw: Path) -> None:
    (hw / "cpu.perf.json").write_text('{"meta": [1], "params": {}}')
    with pytest.raises(TokenmillError, match="'meta' must be an object"):
        local_params("cpu")


def test_local_fit_beats_no_backend_and_tokenmill(hw: Path) -> None:
    write_local_params(local_params_path("cpu"), LOCAL, META)
    for backend in (None, "tokenmill"):
        params, notes = resolve_params("cpu", backend)
        assert params == LOCAL, backend
        assert "calibrate local" in notes[0]


def test_a_named_engine_uses_the_shipped_table(hw: Path, shipped: dict[str, Any]) -> None:
    write_cpu_entry(hw)
    write_local_params(local_params_path("cpu"), LOCAL, META)
    params, notes = resolve_params("cpu", "sglang")
    sglang = shipped["backends"]["sglang"]
    assert set(sglang) & set(ENGINE_FIELDS)
    for key in set(sglang) & set(ENGINE_FIELDS):
        assert getattr(params, key) == sglang[key], key
    assert params.step_overhead_s == shipped["global"]["step_overhead_s"] != LOCAL.step_overhead_s
    # no fitted GPU of the cpu entry's architecture: each GPU constant is the median of the fitted
    # GPUs' (five of them, so one of their values), said so
    gpus = shipped["gpus"].values()
    assert params.matmul_efficiency in {g["matmul_efficiency"] for g in gpus}
    assert params.matmul_efficiency != LOCAL.matmul_efficiency
    assert params.collective_latency_s in {g["collective_latency_s"] for g in gpus}
    assert any("median of the fitted GPUs'" in n for n in notes)
    assert params.stream_per_token_s == 0.0  # SGLang detokenizes in another process
    assert any("cpu" in n and "not calibrated" in n for n in notes)


def test_a_bundled_gpu_with_an_engine_reads_its_row(hw: Path, shipped: dict[str, Any]) -> None:
    params, _ = resolve_params("h200", "vllm")
    assert params.matmul_efficiency == shipped["gpus"]["h200"]["matmul_efficiency"]
    assert params.overhead_scale == shipped["backends"]["vllm"]["overhead_scale"]


def test_no_local_fit_and_no_engine_gives_priors(hw: Path) -> None:
    write_cpu_entry(hw)  # an entry without its .perf.json
    params, notes = resolve_params("cpu", None)
    assert params == PerfParams()
    assert params.matmul_efficiency == 0.55 and params.stream_per_token_s == 0.0
    assert len(notes) == 1 and "priors" in notes[0]


def test_tokenmill_engine_without_local_fit_says_it_is_not_calibrated(hw: Path) -> None:
    write_cpu_entry(hw)
    params, notes = resolve_params("cpu", "tokenmill")
    assert params.overhead_scale == 1.0 and params.stream_per_token_s == 0.0
    assert any("tokenmill" in n and "not calibrated" in n for n in notes)


def test_local_fit_is_per_entry(hw: Path, tmp_path: Path) -> None:
    write_local_params(local_params_path("cpu"), LOCAL, META)
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert resolve_params(str(other / "cpu.toml"), None)[0] == PerfParams()
    write_local_params(other / "cpu.perf.json", LOCAL.updated(matmul_efficiency=0.2), META)
    assert resolve_params(str(other / "cpu.toml"), None)[0].matmul_efficiency == 0.2
    assert resolve_params("cpu", None)[0].matmul_efficiency == 0.05
