"""A measured-CPU entry for tests: the figures ``calibrate local`` would write (round numbers)."""

from __future__ import annotations

from tokenmill.hardware.local import MachineMeasurements


def measured_cpu(memory_bytes: int = 16 * 1024**3) -> MachineMeasurements:
    """400 GFLOP/s bf16 GEMMs, 40 GB/s copy, two threads."""
    return MachineMeasurements(
        name="cpu",
        display_name="test CPU",
        architecture="x86_64",
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=40e9,
        gemm_flops=400e9,
        engine_dtype="bfloat16",
        threads=2,
        command="test",
    )
