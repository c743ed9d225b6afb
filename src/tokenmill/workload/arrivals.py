"""When open-loop requests are sent: arrival processes that match the two bench clients.

``poisson_arrivals`` follows SGLang ``bench_serving``: the first request goes at t = 0, and each
next one after a gap ~ Exp(mean 1/rate) (``np.random.exponential``). Its ``burstiness`` b gives
vLLM's gap shape, Gamma(shape=b, scale=1/(rate·b)), in that same layout (first request at t = 0,
no rescaling), so that b = 1 is the Poisson stream above, bit for bit. ``gamma_arrivals`` follows
vLLM ``bench serve --burstiness``: gaps ~ Gamma(shape=b, scale=1/(rate·b)), with the first
request delayed by a gap too, and (for a fixed count) the cumulative delays rescaled so that N
requests span exactly N/rate. Closed-loop traffic has no arrival times; it is
``Workload.concurrency``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_positive

FloatArray = npt.NDArray[np.float64]


def _count_or_duration(n: int | None, duration_s: float | None) -> tuple[int | None, float | None]:
    if (n is None) == (duration_s is None):
        raise TokenmillError("give exactly one of n (a request count) and duration_s (a time window)")
    if n is not None:
        return check_int("n", n, 0), None
    assert duration_s is not None
    return None, check_positive("duration_s", duration_s)


#: Requests one workload may hold: simulating this many takes minutes; more is a mistake in the
#: flags (at 10¹⁰ the arrival times alone would take 75 GiB)
MAX_REQUESTS = 1_000_000


def poisson_arrivals(
    rate: float, n: int | None = None, duration_s: float | None = None, *, seed: int = 0, burstiness: float = 1.0
) -> FloatArray:
    """Send times (s) of a Poisson process at ``rate`` requests/s, as SGLang bench_serving sends.

    Give ``n`` for that many requests, or ``duration_s`` for every arrival in [0, duration_s).
    ``rate = inf`` sends everything at t = 0 (bench_serving's default ``--request-rate inf``) and
    needs ``n``.

    ``burstiness`` b (vLLM's ``--burstiness``, finite and > 0) draws the gaps from
    Gamma(shape=b, scale=1/(rate·b)) instead: the mean gap stays 1/rate and the coefficient of
    variation becomes 1/√b, so b < 1 is burstier than Poisson and b > 1 more regular. b = 1 draws
    the exponential gaps exactly as without the argument (same generator calls, same numbers), so
    existing seeds keep their arrivals. Unlike vLLM (and ``gamma_arrivals``), the cumulative delays
    are *not* rescaled to make n requests span n/rate: vLLM rescales at b = 1 too, which would
    change the Poisson stream this function has always produced, and rescaling only b ≠ 1 would
    make b = 1.0001 a different kind of process from b = 1. The realized rate of n requests so
    differs from ``rate`` by a relative 1/√(n·b) or so, as SGLang's does at b = 1.
    """
    r = check_positive("rate", rate, allow_inf=True)
    b = check_positive("burstiness", burstiness)
    count, window = _count_or_duration(n, duration_s)
    if math.isinf(r):
        if b != 1.0:
            raise TokenmillError("burstiness shapes the gaps between arrivals; rate = inf has none: give a finite rate")
        if count is None:
            raise TokenmillError("rate = inf sends every request at t = 0; give n, not duration_s")
        return np.zeros(count, dtype=np.float64)
    rng = np.random.default_rng(seed)

    def draw(size: int) -> FloatArray:
        # b = 1 keeps the exponential call (numpy's gamma at shape 1 happens to give the same
        # numbers today, but the Poisson stream should not hang on that implementation detail).
        if b == 1.0:
            return rng.exponential(1.0 / r, size=size)
        return rng.gamma(shape=b, scale=1.0 / (r * b), size=size)

    if count is not None:
        if count > MAX_REQUESTS:
            raise TokenmillError(f"{count:,} requests asked for; at most {MAX_REQUESTS:,} are generated")
        if count == 0:
            return np.zeros(0, dtype=np.float64)
        gaps = draw(count - 1)
        return np.concatenate(([0.0], np.cumsum(gaps))).astype(np.float64)
    assert window is not None
    if window * r > MAX_REQUESTS:
        raise TokenmillError(
            f"--rate {r:g} × --duration {window:g} s asks for about {window * r:.3g} requests; "
            f"at most {MAX_REQUESTS:,} are generated"
        )
    times: list[FloatArray] = [np.zeros(1, dtype=np.float64)]
    t = 0.0
    chunk = max(16, int(window * r * 1.2) + 16)
    while t < window:
        more = t + np.cumsum(draw(chunk))
        times.append(more)
        t = float(more[-1])
    out = np.concatenate(times)
    return out[out < window].astype(np.float64)


def gamma_arrivals(
    rate: float,
    burstiness: float = 1.0,
    n: int | None = None,
    duration_s: float | None = None,
    *,
    seed: int = 0,
    rescale: bool = True,
) -> FloatArray:
    """Send times (s) with Gamma gaps, as vLLM ``bench serve --burstiness b`` sends.

    Gaps ~ Gamma(shape=b, scale=1/(rate·b)): mean 1/rate, coefficient of variation 1/√b. b = 1 is
    Poisson, b < 1 burstier, ``b = inf`` constant gaps of 1/rate. With ``n`` and ``rescale`` the
    cumulative delays are scaled so the last request goes at exactly n/rate, as vLLM does to
    steady throughput across seeds; with ``duration_s`` no rescaling is possible and none is done.
    """
    r = check_positive("rate", rate)
    b = check_positive("burstiness", burstiness, allow_inf=True)
    count, window = _count_or_duration(n, duration_s)
    rng = np.random.default_rng(seed)

    def draw(size: int) -> FloatArray:
        if math.isinf(b):
            return np.full(size, 1.0 / r, dtype=np.float64)
        return rng.gamma(shape=b, scale=1.0 / (r * b), size=size).astype(np.float64)

    if count is not None:
        if count == 0:
            return np.zeros(0, dtype=np.float64)
        delays = np.cumsum(draw(count))
        if rescale and delays[-1] > 0:
            delays = delays * ((count / r) / delays[-1])
        return delays.astype(np.float64)
    assert window is not None
    parts: list[FloatArray] = []
    t = 0.0
    chunk = max(16, int(window * r * 1.2) + 16)
    while t < window:
        more = t + np.cumsum(draw(chunk))
        parts.append(more)
        t = float(more[-1])
    out = np.concatenate(parts)
    return out[out < window].astype(np.float64)
