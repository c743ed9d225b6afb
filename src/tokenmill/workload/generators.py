"""Synthetic traffic: the seed's request kinds, bench_serving's random dataset, agentic sessions.

Every generator takes a ``seed`` and returns a ``Workload``; the same arguments give an equal
workload, bit for bit. Sizes and arrivals draw from separate seed streams, so changing the
arrival rate does not change the requests' sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_fraction, check_int, check_non_negative, check_positive
from tokenmill.workload.arrivals import MAX_REQUESTS, poisson_arrivals
from tokenmill.workload.request import RequestSpec, Workload, content_block_ids, sort_sessions

#: request_id prefixes of ``interference``: decoding streams and the prompts that disturb them.
STREAM_PREFIX = "stream-"
PROBE_PREFIX = "probe-"

#: Think/tool gaps are capped as trace replays cap them (AgentX replay: 300 s per-trajectory idle cap).
MAX_THINK_TIME_S = 300.0


def _subseed(seed: int, tag: int) -> int:
    """An independent integer seed for one concern (sizes, arrivals) of one generator call."""
    return int(np.random.SeedSequence([seed, tag]).generate_state(1, dtype=np.uint64)[0])


def _norm_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[clip(X, lo, hi)] for X ~ LogNormal(mu, sigma): what a clipped draw averages to."""
    a, b = math.log(lo), math.log(hi)
    below = lo * _norm_cdf((a - mu) / sigma)
    above = hi * (1.0 - _norm_cdf((b - mu) / sigma))
    inside = math.exp(mu + sigma**2 / 2) * (
        _norm_cdf((b - mu - sigma**2) / sigma) - _norm_cdf((a - mu - sigma**2) / sigma)
    )
    return below + inside + above


def lognormal_mu_for_clipped_mean(mean: float, sigma: float, lo: float, hi: float) -> float:
    """The ``mu`` whose lognormal, clipped to [lo, hi], has mean ``mean`` (bisection on ``mu``).

    Clipping moves the mean, so fitting ``mu`` to the clipped draw keeps the advertised mean true.
    """
    if not lo < mean < hi:
        raise TokenmillError(f"mean {mean} must lie strictly between the clip bounds {lo} and {hi}")
    left, right = math.log(lo) - 10 * sigma, math.log(hi) + 10 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if clipped_lognormal_mean(mid, sigma, lo, hi) < mean:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def _check_burstiness(burstiness: float, rate: float | None) -> float:
    """``burstiness`` as a finite float > 0, refused unless 1 where no finite ``rate`` paces the
    arrivals: closed loop and ``rate = inf`` have no gaps to shape, and a value that changes
    nothing should not look as if it had."""
    b = check_positive("burstiness", burstiness)
    if b != 1.0 and (rate is None or math.isinf(rate)):
        raise TokenmillError(f"burstiness {b:g} shapes the gaps of open-loop arrivals: it needs a finite rate")
    return b


def _plan_arrivals(
    n: int | None,
    rate: float | None,
    duration_s: float | None,
    concurrency: int | None,
    seed: int,
    *,
    default_rate: float | None = None,
    burstiness: float = 1.0,
) -> tuple[int, list[float | None], int | None]:
    """How many requests (or sessions) and their first-send times, open or closed loop.

    Open-loop gaps are exponential, or Gamma with ``burstiness`` ≠ 1 (see ``poisson_arrivals``).
    """
    if concurrency is not None:
        check_int("concurrency", concurrency, 1)
    if rate is None and concurrency is None:
        if default_rate is None:
            raise TokenmillError("give rate (open loop, requests/s) or concurrency (closed loop)")
        rate = default_rate
    _check_burstiness(burstiness, rate)
    if rate is None:
        if n is None or duration_s is not None:
            raise TokenmillError("closed loop (concurrency) needs n and no duration_s")
        return check_int("n", n, 0), [None] * n, concurrency
    times = poisson_arrivals(rate, n=n, duration_s=duration_s, seed=_subseed(seed, 1), burstiness=burstiness)
    return len(times), [float(t) for t in times], concurrency


def _lognormal_ints(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int, size: int) -> list[int]:
    draws = np.clip(np.rint(rng.lognormal(math.log(median), sigma, size=size)), lo, hi)
    return [int(x) for x in draws]


def fresh_requests(
    n: int | None = None,
    *,
    rate: float | None = None,
    duration_s: float | None = None,
    concurrency: int | None = None,
    mean_prompt_tokens: float = 8_400.0,
    prompt_sigma: float = 0.5,
    min_prompt_tokens: int = 1_024,
    max_prompt_tokens: int = 32_768,
    max_output_tokens: int = 512,
    text_output_median: float = 400.0,
    text_output_sigma: float = 0.6,
    tool_call_fraction: float = 1 / 3,
    tool_output_tokens: tuple[int, int] = (30, 300),
    seed: int = 0,
    block_tokens: int = 64,
    name: str = "fresh",
    burstiness: float = 1.0,
) -> Workload:
    """The seed's *fresh request* (§1.4): one coding-agent call that shares no prefix.

    - Prompt: lognormal with ``sigma = prompt_sigma`` (0.5: coefficient of variation ≈ 0.53),
      rounded and clipped to [``min_prompt_tokens``, ``max_prompt_tokens``] = [1,024, 32,768], its
      ``mu`` solved so the *clipped* mean is ``mean_prompt_tokens`` = 8,400 (the seed: "about
      8,400 prompt tokens on average"). The seed gives only the mean; the spread is our choice.
    - Answer: with probability ``tool_call_fraction`` = 1/3 ("about a third of the answers are
      tool calls") a tool call of uniform [30, 300] tokens delivered whole; otherwise streamed
      text, lognormal with median 400 and sigma 0.6 clipped to [1, ``max_output_tokens`` = 512]
      (about 35 % of text answers hit the 512 cap).
    - Content: every request is its own token stream, so no two share a block.
    - Arrivals: Poisson at ``rate`` (with ``n`` or ``duration_s``; Gamma gaps with
      ``burstiness`` ≠ 1, vLLM's ``--burstiness``), or closed loop at ``concurrency`` with ``n``;
      both give bench_serving's rate plus a concurrency cap.
    """
    check_int("seed", seed, 0)
    check_positive("mean_prompt_tokens", mean_prompt_tokens)
    check_positive("prompt_sigma", prompt_sigma)
    check_int("min_prompt_tokens", min_prompt_tokens, 1)
    check_int("max_prompt_tokens", max_prompt_tokens, min_prompt_tokens)
    check_int("max_output_tokens", max_output_tokens, 1)
    check_positive("text_output_median", text_output_median)
    check_positive("text_output_sigma", text_output_sigma)
    check_fraction("tool_call_fraction", tool_call_fraction)
    tool_lo, tool_hi = tool_output_tokens
    check_int("tool_output_tokens[0]", tool_lo, 1)
    check_int("tool_output_tokens[1]", tool_hi, tool_lo)
    count, arrivals, conc = _plan_arrivals(n, rate, duration_s, concurrency, seed, burstiness=burstiness)

    mu = lognormal_mu_for_clipped_mean(mean_prompt_tokens, prompt_sigma, min_prompt_tokens, max_prompt_tokens)
    rng = np.random.default_rng(_subseed(seed, 0))
    prompts = np.clip(np.rint(rng.lognormal(mu, prompt_sigma, size=count)), min_prompt_tokens, max_prompt_tokens)
    is_tool = rng.random(size=count) < tool_call_fraction
    tool_out = rng.integers(tool_lo, tool_hi + 1, size=count)
    text_out = _lognormal_ints(rng, text_output_median, text_output_sigma, 1, max_output_tokens, count)
    width = max(5, len(str(max(count - 1, 0))))
    requests = []
    for i in range(count):
        rid = f"fresh-{i:0{width}d}"
        prompt = int(prompts[i])
        requests.append(
            RequestSpec(
                request_id=rid,
                prompt_tokens=prompt,
                output_tokens=min(int(tool_out[i]), max_output_tokens) if is_tool[i] else text_out[i],
                arrival_s=arrivals[i],
                tool_call=bool(is_tool[i]),
                block_ids=content_block_ids(f"{name}/{seed}/{rid}", prompt, block_tokens),
            )
        )
    return Workload(name=name, requests=tuple(requests), block_tokens=block_tokens, concurrency=conc)


def long_sessions(
    num_sessions: int = 4,
    turns_per_session: int = 4,
    *,
    history_tokens: int = 118_000,
    returning_turn_tokens: int = 2_000,
    output_tokens: int = 512,
    think_time_s: float = 0.0,
    spread: float = 0.05,
    rate: float | None = None,
    seed: int = 0,
    block_tokens: int = 64,
    name: str = "long-sessions",
    burstiness: float = 1.0,
) -> Workload:
    """The seed's *long session* (§1.4, §2.3): a huge history, then short returning turns.

    Turn 0's prompt is a history of about ``history_tokens`` (118,000). Each later turn's prompt
    is the previous prompt plus the previous answer plus about ``returning_turn_tokens`` (2,000)
    new tokens, so its block ids extend the previous turn's. Each size is scaled by an independent
    uniform factor in [1 − ``spread``, 1 + ``spread``] (the seed says "about"; ±5 % is our choice).
    ``turns_per_session`` counts turn 0: the seed's experiment is 4 sessions × (1 + 3 returning).
    The answer length (512, the fresh request's cap) and think time (0: the next turn goes as
    soon as the previous completes) are not in the seed; both are parameters.

    Sessions all start at t = 0 as in the seed, or Poisson at ``rate`` sessions/s (Gamma gaps
    with ``burstiness`` ≠ 1, as ``poisson_arrivals`` draws them).
    """
    check_int("seed", seed, 0)
    check_int("num_sessions", num_sessions, 0)
    check_int("turns_per_session", turns_per_session, 1)
    if num_sessions * turns_per_session > MAX_REQUESTS:  # one workload holds at most this many
        raise TokenmillError(
            f"num_sessions × turns_per_session = {num_sessions * turns_per_session:,} requests; "
            f"at most {MAX_REQUESTS:,} are generated"
        )
    check_int("history_tokens", history_tokens, 1)
    check_int("returning_turn_tokens", returning_turn_tokens, 1)
    check_int("output_tokens", output_tokens, 1)
    check_non_negative("think_time_s", think_time_s)
    spread = check_fraction("spread", spread)
    if spread >= 1:
        raise TokenmillError(f"spread must be < 1 (got {spread})")
    _check_burstiness(burstiness, rate)
    starts = [0.0] * num_sessions
    if rate is not None:
        times = poisson_arrivals(rate, n=num_sessions, seed=_subseed(seed, 1), burstiness=burstiness)
        starts = [float(t) for t in times]
    rng = np.random.default_rng(_subseed(seed, 0))
    requests = []
    for s in range(num_sessions):
        sid = f"session-{s:03d}"
        stream = f"{name}/{seed}/{sid}"
        jitter = rng.uniform(1 - spread, 1 + spread, size=2 * turns_per_session + 1)
        prompt = max(1, round(history_tokens * jitter[0]))
        for k in range(turns_per_session):
            out = max(1, round(output_tokens * jitter[2 * k + 1]))
            requests.append(
                RequestSpec(
                    request_id=f"{sid}/turn-{k}",
                    prompt_tokens=prompt,
                    output_tokens=out,
                    arrival_s=starts[s] if k == 0 else None,
                    session_id=sid,
                    turn=k,
                    think_time_s=0.0 if k == 0 else think_time_s,
                    block_ids=content_block_ids(stream, prompt, block_tokens),
                )
            )
            prompt = prompt + out + max(1, round(returning_turn_tokens * jitter[2 * k + 2]))
    return Workload(name=name, requests=sort_sessions(requests), block_tokens=block_tokens)


def random_requests(
    isl: int,
    osl: int,
    n: int,
    *,
    range_ratio: float = 1.0,
    rate: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    block_tokens: int = 64,
    name: str = "random",
    burstiness: float = 1.0,
) -> Workload:
    """bench_serving ``--dataset-name random``: lengths uniform in [range_ratio·len, len].

    As SGLang draws them: ``randint(max(int(len·r), 1), len + 1)`` for input and output alike.
    Prompts are random token ids, so nothing is shared. With neither ``rate`` nor
    ``concurrency`` every request is sent at t = 0 (``--request-rate inf``); InferenceX's
    fixed-length runs use ``concurrency`` (``--max-concurrency C --request-rate inf``). A finite
    ``rate`` sends Poisson arrivals, or Gamma ones with ``burstiness`` ≠ 1 (vLLM's ``--burstiness``).
    """
    check_int("seed", seed, 0)
    check_int("isl", isl, 1)
    check_int("osl", osl, 1)
    ratio = check_fraction("range_ratio", range_ratio)
    if rate is None and concurrency is not None:
        count, arrivals, conc = _plan_arrivals(n, None, None, concurrency, seed, burstiness=burstiness)
    else:
        count, arrivals, conc = _plan_arrivals(
            n, rate, None, concurrency, seed, default_rate=math.inf, burstiness=burstiness
        )
    rng = np.random.default_rng(_subseed(seed, 0))
    ins = rng.integers(max(int(isl * ratio), 1), isl + 1, size=count)
    outs = rng.integers(max(int(osl * ratio), 1), osl + 1, size=count)
    width = max(5, len(str(max(count - 1, 0))))
    requests = []
    for i in range(count):
        rid = f"random-{i:0{width}d}"
        requests.append(
            RequestSpec(
                request_id=rid,
                prompt_tokens=int(ins[i]),
                output_tokens=int(outs[i]),
                arrival_s=arrivals[i],
                block_ids=content_block_ids(f"{name}/{seed}/{rid}", int(ins[i]), block_tokens),
            )
        )
    return Workload(name=name, requests=tuple(requests), block_tokens=block_tokens, concurrency=conc)


@dataclass(frozen=True)
class AgenticBenchmark:
    """Per-benchmark shape of agent sessions (Exgentic v2 blog table, reference §4.1).

    ``turns_*``, ``tool_calls_per_run`` and ``avg_tokens_per_run`` are the blog's; the turns
    per session are lognormal with the blog's median and mean (sigma = √(2 ln(mean/median))),
    clipped to [1, max]. ``new_tokens_median`` is ours: the median of the tokens each turn adds
    besides the previous answer (tool results, user messages), calibrated by simulation so the
    expected Σ(prompt + output) per run matches ``avg_tokens_per_run`` within about 10 %.
    """

    turns_median: float
    turns_mean: float
    turns_max: int
    tool_calls_per_run: float
    avg_tokens_per_run: float
    new_tokens_median: float

    @property
    def turns_sigma(self) -> float:
        """Lognormal sigma that gives the blog's mean for its median."""
        return math.sqrt(2 * math.log(self.turns_mean / self.turns_median))

    @property
    def tool_call_share(self) -> float:
        """Share of non-final turns answered with a tool call.

        Tool calls per run ÷ mean turns, divided by ``CALLS_PER_TOOL_MESSAGE`` because one message
        can hold several parallel calls.
        """
        return min(1.0, self.tool_calls_per_run / self.turns_mean / CALLS_PER_TOOL_MESSAGE)


#: Mean tool calls per tool-calling message: ~88 % have 1, ~8 % have 2, a tail to 20–58 (§4.1
#: "Parallel tool calls per message"); 0.88·1 + 0.08·2 + 0.04·4 ≈ 1.2.
CALLS_PER_TOOL_MESSAGE = 1.2

#: Reference §4.1 "Per-benchmark statistics" (Turns median/mean/max, Tool calls/run, Avg tokens/run).
AGENTIC_BENCHMARKS: dict[str, AgenticBenchmark] = {
    "swe-bench": AgenticBenchmark(38, 46.8, 259, 31.7, 2.1e6, 450),
    "appworld": AgenticBenchmark(19, 32.3, 300, 27.8, 1.7e6, 690),
    "browsecomp-plus": AgenticBenchmark(13, 19.7, 167, 15.4, 1.6e6, 4_100),
    "tau2-telecom": AgenticBenchmark(13, 16.3, 198, 5.9, 332e3, 125),
    "tau2-airline": AgenticBenchmark(10, 11.4, 151, 6.2, 255e3, 660),
    "tau2-retail": AgenticBenchmark(11, 11.9, 151, 5.5, 198e3, 230),
}

#: Reference §4.1 "Prefix retention" (share of messages carried over to the next call), by harness.
HARNESS_PREFIX_RETENTION: dict[str, float] = {
    "claude_code": 0.90,
    "smolagents_code": 0.87,
    "tool_calling": 0.87,
    "openai_solo": 0.86,
    "tool_calling_with_shortlisting": 0.03,
}


def agentic_sessions(
    num_sessions: int,
    *,
    benchmark: str = "swe-bench",
    harness: str = "claude_code",
    rate: float | None = None,
    concurrency: int | None = None,
    large_base_fraction: float = 0.5,
    small_base_tokens: tuple[int, int] = (800, 4_000),
    large_base_median: float = 22_000.0,
    large_base_sigma: float = 0.1,
    tool_output_median: float = 60.0,
    text_output_median: float = 300.0,
    max_prompt_tokens: int = 200_000,
    think_median_s: float = 2.0,
    think_sigma: float = 1.2,
    seed: int = 0,
    block_tokens: int = 64,
    name: str | None = None,
    burstiness: float = 1.0,
) -> Workload:
    """Synthetic agent sessions shaped like the Exgentic v2 traces (reference §4.1).

    Per session (each parameter, and where its value comes from):

    - Turns: lognormal from ``AGENTIC_BENCHMARKS[benchmark]`` (blog "Per-benchmark statistics":
      e.g. SWE-bench median 38 / mean 46.8 / max 259, τ²-Retail 11 / 11.9 / 151).
    - First prompt (system prompt + tool definitions + task), bimodal as the census says
      ("a ~800–4,000-token cluster and a dense ~22K cluster (large available_tools)"): with
      probability ``large_base_fraction`` lognormal(median 22,000, sigma 0.1), else log-uniform in
      [800, 4,000]. The mixing weight (0.5) is not published; it is our guess.
    - Answers: a non-final turn is a tool call with probability ``tool_call_share`` (blog tool
      calls/run ÷ mean turns ÷ 1.2 calls per message), lognormal median ``tool_output_median`` = 60
      tokens, sigma 0.8, in [8, 2,000]; other turns (and always the last) are text, lognormal median
      ``text_output_median`` = 300, sigma 1.0, in [16, 8,192]. "Right-skewed, with many tiny
      tool-call turns" is the census; medians and sigmas are ours.
    - Growth: the next prompt = previous prompt + previous answer + new tokens (tool results, user
      turns), lognormal with the benchmark's calibrated ``new_tokens_median`` and sigma 1.0, in
      [16, 32,768]. A prompt that would pass ``max_prompt_tokens`` (200K, a context-window
      assumption) is compacted: it restarts at the first prompt plus the new tokens.
    - Prefix sharing: with probability ``HARNESS_PREFIX_RETENTION[harness]`` (blog: claude_code
      0.90, smolagents_code/tool_calling 0.87, openai_solo 0.86, tool_calling_with_shortlisting
      0.03) the next call extends the previous one's token stream; otherwise the prompt is rebuilt
      (same length, a new stream, nothing shared). Compaction also starts a new stream.
    - Think/tool gaps: lognormal with median ``think_median_s`` = 2 s and sigma 1.2, capped at
      300 s. The reference has only run durations (5–16 min per run), not the gaps; ours.

    Sessions start Poisson at ``rate`` sessions/s (Gamma gaps with ``burstiness`` ≠ 1), or closed
    loop with ``concurrency`` live clients (AIPerf's AgentX mode), one session per client at a time.
    """
    check_int("seed", seed, 0)
    check_int("num_sessions", num_sessions, 0)
    if benchmark not in AGENTIC_BENCHMARKS:
        raise TokenmillError(f"benchmark must be one of {', '.join(AGENTIC_BENCHMARKS)} (got {benchmark!r})")
    if harness not in HARNESS_PREFIX_RETENTION:
        raise TokenmillError(f"harness must be one of {', '.join(HARNESS_PREFIX_RETENTION)} (got {harness!r})")
    check_fraction("large_base_fraction", large_base_fraction)
    small_lo, small_hi = small_base_tokens
    check_int("small_base_tokens[0]", small_lo, 1)
    check_int("small_base_tokens[1]", small_hi, small_lo)
    check_positive("large_base_median", large_base_median)
    check_positive("large_base_sigma", large_base_sigma)
    check_positive("tool_output_median", tool_output_median)
    check_positive("text_output_median", text_output_median)
    check_int("max_prompt_tokens", max_prompt_tokens, 1)
    check_positive("think_median_s", think_median_s)
    check_positive("think_sigma", think_sigma)
    bench = AGENTIC_BENCHMARKS[benchmark]
    retention = HARNESS_PREFIX_RETENTION[harness]
    label = name or f"agentic-{benchmark}-{harness}"
    count, starts, conc = _plan_arrivals(num_sessions, rate, None, concurrency, seed, burstiness=burstiness)

    rng = np.random.default_rng(_subseed(seed, 0))
    requests: list[RequestSpec] = []
    for s in range(count):
        sid = f"session-{s:05d}"
        turns = int(np.clip(round(rng.lognormal(math.log(bench.turns_median), bench.turns_sigma)), 1, bench.turns_max))
        if rng.random() < large_base_fraction:
            base = round(rng.lognormal(math.log(large_base_median), large_base_sigma))
        else:
            base = round(math.exp(rng.uniform(math.log(small_lo), math.log(small_hi))))
        base = min(max(base, 1), max_prompt_tokens)
        tool = (rng.random(size=turns) < bench.tool_call_share) & (np.arange(turns) < turns - 1)
        tool_out = _lognormal_ints(rng, tool_output_median, 0.8, 8, 2_000, turns)
        text_out = _lognormal_ints(rng, text_output_median, 1.0, 16, 8_192, turns)
        new_tokens = _lognormal_ints(rng, bench.new_tokens_median, 1.0, 16, 32_768, turns)
        keep = rng.random(size=turns) < retention
        gaps = np.minimum(rng.lognormal(math.log(think_median_s), think_sigma, size=turns), MAX_THINK_TIME_S)
        stream_no = 0
        prompt = base
        for k in range(turns):
            if k > 0:
                grown = prompt + requests[-1].output_tokens + new_tokens[k]
                if grown > max_prompt_tokens:
                    grown = min(base + new_tokens[k], max_prompt_tokens)
                    stream_no += 1
                elif not keep[k]:
                    stream_no += 1
                prompt = grown
            out = tool_out[k] if tool[k] else text_out[k]
            requests.append(
                RequestSpec(
                    request_id=f"{sid}/turn-{k:03d}",
                    prompt_tokens=prompt,
                    output_tokens=out,
                    arrival_s=starts[s] if k == 0 else None,
                    session_id=sid,
                    turn=k,
                    think_time_s=0.0 if k == 0 else float(gaps[k]),
                    tool_call=bool(tool[k]),
                    block_ids=content_block_ids(f"{label}/{seed}/{sid}/{stream_no}", prompt, block_tokens),
                )
            )
    return Workload(name=label, requests=sort_sessions(requests), block_tokens=block_tokens, concurrency=conc)


def interference(
    num_streams: int = 16,
    *,
    stream_prompt_tokens: int = 8_400,
    stream_output_tokens: int | None = None,
    quiet_s: float = 10.0,
    window_s: float = 24.0,
    probe_interval_s: float = 1.0,
    probe_prompt_tokens: int = 8_400,
    probe_output_tokens: int = 1,
    max_stream_tokens_per_s: float = 200.0,
    seed: int = 0,
    block_tokens: int = 64,
    name: str = "interference",
) -> Workload:
    """The seed's §2.4 experiment: what prefills cost decoding streams on a shared server.

    ``num_streams`` (16) decoding requests start at t = 0. After ``quiet_s`` (the seed says "a
    quiet period"; 10 s is ours), one probe per ``probe_interval_s`` (1 s) for ``window_s`` (24 s):
    a prompt of ``probe_prompt_tokens`` (the seed ran 8,400 and 2,000) asking for
    ``probe_output_tokens`` = 1. Streams default to enough output to decode through the whole
    window even at ``max_stream_tokens_per_s`` (200 tok/s, 5 ms/token, faster than any the seed
    measured). Streams' ids start with ``STREAM_PREFIX``, probes' with ``PROBE_PREFIX``. Nothing is
    random; ``seed`` only names the content streams so two runs with different seeds share nothing.
    """
    check_int("seed", seed, 0)
    check_int("num_streams", num_streams, 0)
    check_int("stream_prompt_tokens", stream_prompt_tokens, 1)
    quiet = check_non_negative("quiet_s", quiet_s)
    window = check_positive("window_s", window_s)
    interval = check_positive("probe_interval_s", probe_interval_s)
    check_int("probe_prompt_tokens", probe_prompt_tokens, 1)
    check_int("probe_output_tokens", probe_output_tokens, 1)
    speed = check_positive("max_stream_tokens_per_s", max_stream_tokens_per_s)
    if stream_output_tokens is None:
        stream_output_tokens = math.ceil((quiet + window) * speed)
    check_int("stream_output_tokens", stream_output_tokens, 1)
    requests = []
    for i in range(num_streams):
        rid = f"{STREAM_PREFIX}{i:02d}"
        requests.append(
            RequestSpec(
                request_id=rid,
                prompt_tokens=stream_prompt_tokens,
                output_tokens=stream_output_tokens,
                arrival_s=0.0,
                block_ids=content_block_ids(f"{name}/{seed}/{rid}", stream_prompt_tokens, block_tokens),
            )
        )
    num_probes = math.floor(window / interval + 1e-9)
    for j in range(num_probes):
        rid = f"{PROBE_PREFIX}{j:02d}"
        requests.append(
            RequestSpec(
                request_id=rid,
                prompt_tokens=probe_prompt_tokens,
                output_tokens=probe_output_tokens,
                arrival_s=quiet + j * interval,
                block_ids=content_block_ids(f"{name}/{seed}/{rid}", probe_prompt_tokens, block_tokens),
            )
        )
    return Workload(name=name, requests=tuple(requests), block_tokens=block_tokens)
