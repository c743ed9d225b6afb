"""A hardware entry measured on this machine (``tokenmill calibrate local``): render, parse, look up."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.hardware import gpu_table_rows, list_gpus, load_gpu, parse_gpu_toml
from tokenmill.hardware.catalog import local_hardware_names
from tokenmill.hardware.local import MachineMeasurements, render_toml, write_entry

GIB = 1024**3


def measurements(
    name: str = "cpu",
    memory_bytes: int = 16 * GIB,
    bandwidth: float = 38.96e9,
    flops: float = 412.5e9,
    display_name: str = 'Intel(R) Xeon(R) "Test" CPU @ 2.20GHz',
) -> MachineMeasurements:
    return MachineMeasurements(
        name=name,
        display_name=display_name,
        architecture="x86_64",
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth,
        gemm_flops=flops,
        engine_dtype="bfloat16",
        threads=2,
        command="tokenmill calibrate local --quick",
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path))
    return tmp_path / "hardware"


def test_round_trip_converts_units_by_hand() -> None:
    gpu = parse_gpu_toml(render_toml(measurements()), "cpu.toml")
    assert gpu.name == "cpu" and gpu.vendor == "cpu" and gpu.architecture == "x86_64"
    assert gpu.display_name == 'Intel(R) Xeon(R) "Test" CPU @ 2.20GHz'
    # 38.96e9 B/s = 0.03896 TB/s: five decimals of TB/s keep it to the 10 MB/s
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(38.96e9, abs=5e6)
    # 412.5 GFLOP/s = 0.41250 TFLOP/s
    assert gpu.dense_flops == {"bf16": pytest.approx(412.5e9, abs=5e6)}
    # 16 GiB = 16384 MiB exactly; 17.179869184 decimal GB, written to 3 decimals
    assert gpu.memory_visible_bytes == 16 * GIB
    assert gpu.memory_sold_bytes == 17_180_000_000
    assert gpu.scale_up_domain_gpus == 1 and gpu.gpus_per_node == 1
    assert gpu.scale_up_bandwidth_bytes_per_s == pytest.approx(38.96e9, abs=5e5)
    assert gpu.nic_bandwidth_bytes_per_s == pytest.approx(38.96e9, abs=5e5)
    assert gpu.power_watts is None


def test_a_gpu_entry_says_what_was_measured_where() -> None:
    m = MachineMeasurements(
        name="cuda",
        display_name="NVIDIA H200",
        architecture="sm_90",
        memory_bytes=143_771 * 1024**2,
        bandwidth_bytes_per_s=4.25e12,
        gemm_flops=7.5e14,
        engine_dtype="bfloat16",
        threads=16,
        command="tokenmill calibrate local --dtype bfloat16 --device cuda",
        device="cuda",
        vendor="nvidia",
        gemm_size=8192,
        copy_bytes=2 * GIB,
    )
    text = render_toml(m)
    gpu = parse_gpu_toml(text, "cuda.toml")
    assert (gpu.name, gpu.vendor, gpu.architecture) == ("cuda", "nvidia", "sm_90")
    assert gpu.memory_visible_bytes == 143_771 * 1024**2
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(4.25e12, abs=5e6)
    assert gpu.flops("bf16") == pytest.approx(7.5e14, abs=5e6)
    assert "# This machine's cuda, measured by `tokenmill calibrate local --dtype bfloat16 --device cuda`." in text
    assert "# Device memory (torch)" in text and "copy of a 2048 MiB tensor" in text and "8192 x 8192 GEMM" in text
    assert "thread" not in text  # a GPU's rates do not depend on the host's threads


def test_a_cpu_entry_keeps_its_threads_and_sizes() -> None:
    text = render_toml(measurements())
    assert "(2 thread(s))" in text and "# Physical memory (sysconf)" in text
    assert "copy of a 256 MiB tensor" in text and "1024 x 1024 GEMM" in text


@given(
    memory_mib=st.integers(min_value=64, max_value=4 * 1024 * 1024),
    extra_bytes=st.integers(min_value=0, max_value=1024**2 - 1),
    bandwidth=st.floats(min_value=1e9, max_value=2e12),
    flops=st.floats(min_value=1e10, max_value=1e14),
)
def test_round_trip_within_rounding_of_the_printed_fields(
    memory_mib: int, extra_bytes: int, bandwidth: float, flops: float
) -> None:
    m = measurements(memory_bytes=memory_mib * 1024**2 + extra_bytes, bandwidth=bandwidth, flops=flops)
    gpu = parse_gpu_toml(render_toml(m), "cpu.toml")
    # MiB is an integer field: a partial MiB is dropped, never rounded up
    assert gpu.memory_visible_bytes == memory_mib * 1024**2
    # 3 decimals of GB: within half a MB
    assert abs(gpu.memory_sold_bytes - m.memory_bytes) <= 0.5e6 * (1 + 1e-6)
    # 5 decimals of TB/s and TFLOP/s: within half of 1e-5 TB = 5e6
    assert abs(gpu.hbm_bandwidth_bytes_per_s - bandwidth) <= 5e6 * (1 + 1e-6)
    assert abs(gpu.flops("bf16") - flops) <= 5e6 * (1 + 1e-6)


def test_entry_without_power_table_shows_dash() -> None:
    gpu = parse_gpu_toml(render_toml(measurements()), "cpu.toml")
    row = gpu_table_rows([gpu])[0]
    assert row["power (W)"] == "-"
    assert row["GPU"] == "cpu"
    assert row["HBM (TB/s)"] == "0.04"  # 0.03896 TB/s to two decimals
    assert row["FP8 (TFLOP/s)"] == "-"


def test_missing_scale_up_table_is_still_an_error() -> None:
    text = render_toml(measurements())
    head, rest = text.split("[scale_up]", 1)
    without = head + rest[rest.index("[node]") :]
    assert "[scale_up]" not in without and "[node]" in without
    with pytest.raises(TokenmillError, match=r"missing table '\[scale_up\]'"):
        parse_gpu_toml(without, "cpu.toml")


def test_power_table_when_given_still_parses() -> None:
    text = render_toml(measurements()) + "\n[power]\ntdp_w = 125\n"
    gpu = parse_gpu_toml(text, "cpu.toml")
    assert gpu.power_watts == 125.0
    assert gpu_table_rows([gpu])[0]["power (W)"] == "125"


def test_write_entry_then_load_by_name(cache: Path) -> None:
    path, written = write_entry(measurements(), cache)
    assert path == cache / "cpu.toml" and path.is_file()
    assert not list(cache.glob("*.tmp"))
    loaded = load_gpu("cpu")
    assert loaded == written
    assert load_gpu("CPU") == written  # names are case-insensitive, like bundled ones
    assert loaded.hbm_bandwidth_bytes_per_s == pytest.approx(38.96e9, abs=5e6)
    assert local_hardware_names() == ["cpu"]
    names = [g.name for g in list_gpus(include_local=True)]
    assert names[-1] == "cpu" and "cpu" not in [g.name for g in list_gpus()]


def test_write_entry_rejects_invalid_name_and_writes_nothing(cache: Path) -> None:
    with pytest.raises(TokenmillError):
        write_entry(measurements(name="Bad Name"), cache)
    assert not cache.exists() or not list(cache.iterdir())


def test_unknown_cpu_points_to_calibrate_local(cache: Path) -> None:
    with pytest.raises(TokenmillError) as exc:
        load_gpu("cpu")
    message = str(exc.value)
    assert "calibrate local" in message and "\n" not in message


def test_other_unknown_name_lists_measured_entries(cache: Path) -> None:
    write_entry(measurements(name="laptop"), cache)
    with pytest.raises(TokenmillError, match="measured here: laptop"):
        load_gpu("desktop")


def test_bundled_name_wins_over_a_user_file(cache: Path) -> None:
    cache.mkdir(parents=True)
    text = render_toml(measurements(name="h200"))
    (cache / "h200.toml").write_text(text, encoding="utf-8")
    gpu = load_gpu("h200")
    assert gpu.vendor != "cpu"
    assert gpu.memory_sold_bytes == 141 * 10**9
    assert [g.name for g in list_gpus(include_local=True)].count("h200") == 1


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters="\x7f"), min_size=1))
def test_display_name_survives_quoting(display_name: str) -> None:
    if not display_name.strip():
        return  # the catalog rejects a blank display name, measured or not
    gpu = parse_gpu_toml(render_toml(measurements(display_name=display_name)), "cpu.toml")
    assert gpu.display_name == display_name


def test_entry_named_with_a_dash_loads(cache: Path) -> None:
    _, written = write_entry(measurements(name="my-box"), cache)
    assert local_hardware_names() == ["my-box"]
    assert load_gpu("my-box") == written
    assert [g.name for g in list_gpus(include_local=True)][-1] == "my-box"
