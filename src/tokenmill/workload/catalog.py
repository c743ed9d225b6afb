"""``--workload NAME``: the named workloads of ``simulate``, ``sweep`` and ``bench``, built from
one set of options (rate or concurrency, duration or count, seed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import MAX_TOKENS, check_fraction, check_int
from tokenmill.workload.arrivals import MAX_REQUESTS
from tokenmill.workload.request import Workload

WORKLOADS = ("fresh", "long-session", "random", "agentic", "interference", "trace:PATH")


@dataclass(frozen=True)
class WorkloadOptions:
    """The flags a named workload is built from. ``burstiness`` is vLLM's ``--burstiness``: the
    shape of the Gamma gaps between open-loop arrivals at ``rate`` (1 = Poisson, the default)."""

    rate: float | None = None
    concurrency: int | None = None
    duration_s: float | None = None
    num_requests: int | None = None
    seed: int = 0
    block_tokens: int = 64
    isl: int = 1024
    osl: int = 1024
    range_ratio: float = 1.0
    sessions: int = 4
    turns: int = 4
    probe_tokens: int = 8400
    burstiness: float = 1.0


#: The workloads whose open-loop arrivals ``--burstiness`` shapes; ``interference`` has a fixed
#: schedule and ``trace:PATH`` replays or re-draws its sessions' starts elsewhere (``traces``).
BURSTY_WORKLOADS = ("fresh", "long-session", "random", "agentic")


def check_burstiness(
    burstiness: object, rate: float | None, workload: str, rate_flag: str = "--rate", given: bool = False
) -> None:
    """Refuse a ``--burstiness`` that would change nothing: not a finite number > 0, or (other than
    1, or at all where the flag was ``given``) without a finite ``rate_flag`` (closed loop has no
    gaps) or for a workload whose arrivals it does not draw. Silently ignoring it would report a
    burstiness the run did not have."""
    b = burstiness
    if isinstance(b, bool) or not isinstance(b, int | float) or not 0 < b < math.inf:  # also refuses nan
        raise TokenmillError(f"--burstiness must be a finite number > 0 (got {b!r})")
    if b == 1.0 and not given:
        return
    if rate is None or math.isinf(rate):
        raise TokenmillError(f"--burstiness shapes the gaps between arrivals: it needs a finite {rate_flag}")
    if b != 1.0 and workload not in BURSTY_WORKLOADS:
        raise TokenmillError(f"--burstiness applies to --workload {'|'.join(BURSTY_WORKLOADS)} (got {workload!r})")


def make_workload(name: str, opts: WorkloadOptions) -> Workload:
    """Build the workload called ``name`` (one-line error naming ``--workload`` otherwise)."""
    from tokenmill.workload import generators as gen

    if opts.rate is not None and not 0 < opts.rate < math.inf:  # also refuses nan
        raise TokenmillError(f"--rate must be a finite number > 0 (got {opts.rate})")
    if opts.concurrency is not None and opts.concurrency <= 0:
        raise TokenmillError(f"--concurrency must be a positive integer (got {opts.concurrency})")
    if opts.rate is not None and opts.concurrency is not None:
        raise TokenmillError("--rate and --concurrency are alternatives: give one")
    if opts.duration_s is not None and not 0 < opts.duration_s < math.inf:
        raise TokenmillError(f"--duration must be a finite number > 0 (got {opts.duration_s})")
    if opts.num_requests is not None and not 0 < opts.num_requests <= MAX_REQUESTS:
        raise TokenmillError(f"--num-requests must be between 1 and {MAX_REQUESTS:,} (got {opts.num_requests:,})")
    # the generators check their own arguments too, under their own names; here they are the flags
    check_int("--seed", opts.seed, 0)
    for flag, value in (("--isl", opts.isl), ("--osl", opts.osl), ("--probe-tokens", opts.probe_tokens)):
        check_int(flag, value, 1, MAX_TOKENS)
    check_int("--sessions", opts.sessions, 1)
    check_int("--turns", opts.turns, 1)
    check_fraction("--random-range-ratio", opts.range_ratio)
    check_burstiness(opts.burstiness, opts.rate, name)
    n, dur = opts.num_requests, opts.duration_s
    if name == "fresh":
        if opts.concurrency is not None:
            return gen.fresh_requests(
                n or 200, concurrency=opts.concurrency, seed=opts.seed, block_tokens=opts.block_tokens
            )  # closed loop: _check_burstiness has refused a burstiness other than 1
        rate = opts.rate if opts.rate is not None else 1.0
        if n is None and dur is None:
            dur = 240.0
        return gen.fresh_requests(
            n,
            rate=rate,
            duration_s=dur if n is None else None,
            seed=opts.seed,
            block_tokens=opts.block_tokens,
            burstiness=opts.burstiness,
        )
    if name == "long-session":
        if opts.sessions * opts.turns > MAX_REQUESTS:
            raise TokenmillError(
                f"{opts.sessions:,} session{'s' if opts.sessions != 1 else ''} × --turns {opts.turns:,} is "
                f"{opts.sessions * opts.turns:,} requests; "
                f"at most {MAX_REQUESTS:,} are generated"
            )
        return gen.long_sessions(
            opts.sessions,
            opts.turns,
            rate=opts.rate,
            seed=opts.seed,
            block_tokens=opts.block_tokens,
            burstiness=opts.burstiness,
        )
    if name == "random":
        count = n or (int(min((dur or 60.0) * opts.rate, MAX_REQUESTS + 1)) if opts.rate else 100)
        if count > MAX_REQUESTS:
            raise TokenmillError(
                f"--rate × --duration asks for more than {MAX_REQUESTS:,} requests (the most one workload holds)"
            )
        return gen.random_requests(
            opts.isl,
            opts.osl,
            max(1, count),
            range_ratio=opts.range_ratio,
            rate=opts.rate,
            concurrency=opts.concurrency,
            seed=opts.seed,
            block_tokens=opts.block_tokens,
            burstiness=opts.burstiness,
        )
    if name == "agentic":
        sessions = n or 20
        return gen.agentic_sessions(
            sessions,
            rate=opts.rate,
            concurrency=opts.concurrency,
            seed=opts.seed,
            block_tokens=opts.block_tokens,
            burstiness=opts.burstiness,
        )
    if name == "interference":
        return gen.interference(probe_prompt_tokens=opts.probe_tokens, seed=opts.seed, block_tokens=opts.block_tokens)
    if name.startswith("trace:"):
        from tokenmill.workload.traces import load_trace

        path = name.removeprefix("trace:")
        if not path:
            raise TokenmillError("--workload trace:PATH needs a path")
        return load_trace(
            path, block_tokens=opts.block_tokens, rate=opts.rate, concurrency=opts.concurrency, seed=opts.seed
        )
    raise TokenmillError(f"--workload must be one of {'|'.join(WORKLOADS)} (got {name!r})")
