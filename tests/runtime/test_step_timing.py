"""``step_timing``: a timed step keeps the mean of its two passes, or the faster one where the other
is an outlier, and only where the two passes ran the same batch."""

from __future__ import annotations

import pytest

from tokenmill.runtime.step_timing import OUTLIER, TimedStep, _combine_passes


def _step(tokens: int, seconds: float, decodes: int = 0) -> TimedStep:
    return TimedStep(((tokens, 0, True),) if tokens else (), tuple((10, 1) for _ in range(decodes)), seconds)


def test_mean_of_close_timings_faster_of_an_outlier() -> None:
    assert OUTLIER == 1.3
    first = [_step(512, 0.040), _step(0, 0.004, decodes=4), _step(0, 0.003, decodes=4)]
    second = [_step(512, 0.090), _step(0, 0.005, decodes=4), _step(0, 0.0031, decodes=4)]
    got = [s.seconds for s in _combine_passes(first, second)]
    # 0.090 is 2.25× 0.040: an outlier, the faster stays; 0.005 / 0.004 = 1.25 and 0.0031 / 0.003
    # are within 1.3×: their means
    assert got == pytest.approx([0.040, 0.0045, 0.00305])


def test_a_step_whose_shape_differs_keeps_the_second_pass() -> None:
    first = [_step(256, 0.010), _step(0, 0.001, decodes=2)]
    second = [_step(512, 0.030), _step(0, 0.002, decodes=3), _step(0, 0.002, decodes=1)]
    assert _combine_passes(first, second) == second  # no step matches its counterpart


def test_raw_rates_on_the_cpu_are_positive_and_finite() -> None:
    import math

    import torch

    from tokenmill.runtime.step_timing import matmul_flops, memory_bandwidth

    flops = matmul_flops(torch.float32, n=128, repeats=2, device="cpu")
    bandwidth = memory_bandwidth(n_bytes=4 * 1024**2, repeats=2, device="cpu")
    assert math.isfinite(flops) and flops > 0
    assert math.isfinite(bandwidth) and bandwidth > 0


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU")
def test_a_gpu_copy_is_timed_to_the_end_of_its_kernels() -> None:
    """Timed without waiting for the kernels, a 2 GiB copy would "run" at the launch's speed,
    hundreds of TB/s; waited for, no GPU's memory copies faster than 20 TB/s (B300: 8 TB/s)."""
    from tokenmill.runtime.step_timing import memory_bandwidth

    assert 100e9 < memory_bandwidth(device="cuda") < 20e12
