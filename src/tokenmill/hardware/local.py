"""A hardware entry for the machine tokenmill runs on, written from measurements.

``tokenmill calibrate local`` measures the device tokenmill's engine runs on (GEMM rate, memory
bandwidth, memory size): the CPU, or the GPU with ``--device cuda``. It writes it in the
catalog's TOML format to ``user_hardware_dir()/<name>.toml``, so ``--gpu cpu`` works in ``plan``,
``simulate`` and ``sweep`` like a bundled GPU. Every number carries a comment saying how it was
measured. The entry is one device: the scale-up and network fields are required by the format,
and for a one-device entry they are the memory bandwidth (a copy between two workers on one host
goes through memory); they are never used with ``--gpus 1``.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from tokenmill.hardware.catalog import GPU, parse_gpu_toml
from tokenmill.units import GB, TB, MiB


@dataclass(frozen=True)
class MachineMeasurements:
    name: str
    display_name: str
    architecture: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    gemm_flops: float  # dense GEMM FLOP/s of the dtype the engine runs
    engine_dtype: str
    threads: int
    command: str
    device: str = "cpu"  # the torch device measured: "cpu", "cuda" or "cuda:N"
    vendor: str = "cpu"
    gemm_size: int = 1024  # side of the square GEMM timed
    copy_bytes: int = 256 * 1024**2  # bytes of the tensor copied


def cpu_model_name() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def physical_memory_bytes() -> int:
    """Total RAM (bytes), from sysconf."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def gpu_description(device: str) -> tuple[str, str, str, int]:
    """A CUDA device's name, vendor, architecture (``sm_90`` for Hopper) and memory in bytes, as
    torch reports them."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    return props.name, vendor, f"sm_{props.major}{props.minor}", int(props.total_memory)


def render_toml(m: MachineMeasurements) -> str:
    """The catalog file for ``m`` (parsed back by ``parse_gpu_toml`` before it is written)."""
    mem_gb = m.memory_bytes / GB
    bw_tb = m.bandwidth_bytes_per_s / TB
    bw_gb = m.bandwidth_bytes_per_s / GB
    tflops = m.gemm_flops / 1e12
    key_note = (
        "the 16-bit key the cost model reads"
        if m.engine_dtype in ("bfloat16", "bf16")
        else f"measured in {m.engine_dtype}, the dtype the engine runs, under the 16-bit key the cost model reads"
    )
    quoted_name = m.display_name.replace("\\", "\\\\").replace('"', '\\"')
    on_gpu = m.device.startswith("cuda")
    what = f"This machine's {m.device}" if on_gpu else "This machine"
    threads = "" if on_gpu else f" ({m.threads} thread(s))"
    memory_note = "Device memory (torch)" if on_gpu else "Physical memory (sysconf)"
    return f"""# {what}, measured by `{m.command}`{threads}.
# Not a datasheet: rerun the command after a hardware change. Fitted constants: {m.name}.perf.json beside it.
name = "{m.name}"
display_name = "{quoted_name}"
vendor = "{m.vendor}"
architecture = "{m.architecture}"

# {memory_note}, in decimal GB and MiB.
memory_sold_gb = {mem_gb:.3f}
memory_visible_mib = {m.memory_bytes // MiB}
# Measured: copy of a {m.copy_bytes // MiB} MiB tensor, bytes read + written per second (best of 5).
hbm_bandwidth_tb_s = {bw_tb:.5f}

[dense_tflops]
# Measured: {m.gemm_size} x {m.gemm_size} GEMM (best of 5), {key_note}.
bf16 = {tflops:.5f}

[scale_up]
# One device: no scale-up domain. The memory bandwidth stands in (unused with --gpus 1).
domain_gpus = 1
bandwidth_gb_s = {bw_gb:.3f}

[node]
# One device per node; no network between devices. The memory bandwidth stands in (unused).
gpus_per_node = 1
nic_gb_s = {bw_gb:.3f}
"""


def write_entry(m: MachineMeasurements, folder: Path) -> tuple[Path, GPU]:
    """Validate and write ``<folder>/<name>.toml`` atomically; returns its path and the parsed entry."""
    text = render_toml(m)
    path = folder / f"{m.name}.toml"
    gpu = parse_gpu_toml(text, str(path))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path, gpu
