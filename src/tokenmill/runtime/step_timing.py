"""Measure this machine for ``tokenmill calibrate local``: raw rates, and the engine's own steps.

Three measurements, on the device the engine runs on (on a CPU, on the thread count the engine
itself uses: one thread on a machine of two cores or fewer, see ``LLM``):

- ``matmul_flops``: the dense GEMM rate of a dtype (square products, best of a few runs), the
  CPU's counterpart of a GPU datasheet's dense TFLOP/s (on a GPU, the rate a large product
  reaches there);
- ``memory_bandwidth``: a large tensor copy (bytes read + written per second, best of a few), the
  counterpart of HBM bandwidth (on a GPU, a copy in its own memory);
- ``time_engine_steps``: real engine steps of the served model, each timed on the wall clock
  around ``Engine.step`` (scheduling, the model, sampling and bookkeeping: what a request waits
  for), with the shape of the batch it ran. Scenarios are closed batches of fresh requests of one
  prompt length, so the steps cover prefill, chunked prefill mixed with decode, and decode at
  every batch size on the way down as requests finish. Each scenario runs twice and each step
  keeps the mean of its two timings, or the faster one where one is an outlier: the first pass of
  a new shape pays one-off costs (buffers growing, the allocator mapping pages) that a server in
  steady state has long paid, and a transient stall of the machine seldom hits the same step
  twice.

The records are plain tuples, so the fit (``tokenmill.perf.local_fit``) needs no torch and the
runtime needs no cost formula.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tokenmill.core.batch import ScheduledBatch
from tokenmill.runtime.device import device_kind
from tokenmill.runtime.llm import LLM
from tokenmill.runtime.sampling import SamplingParams


@dataclass(frozen=True)
class TimedStep:
    """One engine step: prefill chunks ``(new tokens, start, last chunk)``, decodes ``(context, tokens)``."""

    prefill: tuple[tuple[int, int, bool], ...]
    decode: tuple[tuple[int, int], ...]
    seconds: float


def timed_step(batch: ScheduledBatch, seconds: float) -> TimedStep:
    """The shape of ``batch`` as plain numbers (fixed now: the requests change after the step)."""
    return TimedStep(
        tuple((p.length, p.start, p.last) for p in batch.prefill),
        tuple((d.context, d.tokens) for d in batch.decode),
        seconds,
    )


@dataclass(frozen=True)
class Scenario:
    """``concurrency`` fresh requests of ``prompt_tokens`` random tokens, sent together, each
    generating ``output_tokens`` (EOS ignored)."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int


#: The default grid: batch sizes from 1 to 64 against short and long prompts, at most 32,768
#: prompt tokens per scenario, and single prompts of more lengths (prefill alone, which sets the
#: TTFT of light load). About a minute on two cores with the embedded model.
DEFAULT_SCENARIOS: tuple[Scenario, ...] = tuple(
    Scenario(c, isl, 32) for isl in (32, 128, 512, 2000) for c in (1, 2, 4, 8, 16, 32, 64) if c * isl <= 32768
) + tuple(Scenario(1, isl, 4) for isl in (8, 16, 64, 96, 192, 256, 384, 768, 1024, 1536))
#: Two timings of one step further apart than this ratio: the slower one is an outlier.
OUTLIER = 1.3
#: A small grid for tests and smoke runs.
QUICK_SCENARIOS: tuple[Scenario, ...] = (Scenario(1, 64, 8), Scenario(4, 128, 8), Scenario(16, 32, 8))


#: Sizes of the raw-rate measurements by device kind: a GEMM side and a copy's bytes. A CPU's
#: rate is reached at 1024² (and a larger one takes seconds on one thread); a GPU's needs a product
#: big enough to fill every multiprocessor and a copy far beyond its L2 cache.
GEMM_SIZE = {"cpu": 1024, "cuda": 8192}
COPY_BYTES = {"cpu": 256 * 1024**2, "cuda": 2 * 1024**3}


def _best_of(fn: Callable[[], object], repeats: int, device: str = "cpu") -> float:
    """Fastest of ``repeats`` calls of ``fn``, on the wall clock; on a GPU each call is timed to the
    end of its kernels (a launch returns before they run)."""

    def sync() -> None:
        if device_kind(device) == "cuda":
            torch.cuda.synchronize(device)

    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_flops(dtype: torch.dtype, n: int | None = None, repeats: int = 5, device: str = "cpu") -> float:
    """Dense FLOP/s of an ``n × n`` GEMM in ``dtype`` on ``device`` (2n³ FLOPs; best of
    ``repeats``; ``n`` by default ``GEMM_SIZE`` of the device kind).

    Timed through ``torch.nn.functional.linear``, the call the engine's projections make (an
    activation against a weight stored [out, in]): on a CPU without native bfloat16, ``torch.mm``
    in bfloat16 takes a path ten times slower than ``linear``'s (1 against 10 GFLOP/s on one
    thread of an EPYC without AVX-512 BF16), and a rate the engine never sees would leave the fit
    no efficiency that explains its steps."""
    n = GEMM_SIZE[device_kind(device)] if n is None else n
    x = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    w = torch.randn(n, n, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    linear = torch.nn.functional.linear
    linear(x, w)  # warm-up: first-call dispatch and page faults
    return 2.0 * n**3 / _best_of(lambda: linear(x, w), repeats, device)


def memory_bandwidth(n_bytes: int | None = None, repeats: int = 5, device: str = "cpu") -> float:
    """Bytes per second of a large copy on ``device``, counting the read and the write (as STREAM's
    copy; ``n_bytes`` by default ``COPY_BYTES`` of the device kind)."""
    n_bytes = COPY_BYTES[device_kind(device)] if n_bytes is None else n_bytes
    src = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2.0 * n_bytes / _best_of(lambda: dst.copy_(src), repeats, device)


def time_engine_steps(
    llm: LLM,
    scenarios: Sequence[Scenario],
    seed: int = 0,
    on_scenario: Callable[[Scenario], None] | None = None,
) -> list[TimedStep]:
    """Run each scenario to completion on ``llm`` twice and time every step of both passes; the
    prefix cache is flushed before each pass (and prompts are random) so each one measures fresh
    requests. A step keeps the mean of its two timings, or the faster one where they differ by more
    than ``OUTLIER`` ×: the first pass pays first-touch costs (new shapes, fresh memory), and a
    transient stall of the machine (seen: whole scenarios of short prompts at twice their usual
    time in one run of ``calibrate local``) seldom hits both."""
    rng = random.Random(seed)
    steps: list[TimedStep] = []
    for sc in scenarios:
        first: list[TimedStep] = []
        second: list[TimedStep] = []
        _run_scenario(llm, sc, rng, first)
        _run_scenario(llm, sc, rng, second)
        steps.extend(_combine_passes(first, second))
        if on_scenario is not None:
            on_scenario(sc)
    return steps


def _combine_passes(first: Sequence[TimedStep], second: Sequence[TimedStep]) -> list[TimedStep]:
    """``second`` with each step's time the mean of the two passes where they ran the same batch
    shape at that position (the scheduler is deterministic, so they normally all do), or the faster
    one where one pass took more than ``OUTLIER`` × the other: a first-touch cost or a stall of the
    machine, not the step's typical time (the mean keeps the estimate unbiased; the minimum of two
    noisy timings would be low by about half their spread)."""
    out = list(second)
    for i, (a, b) in enumerate(zip(first, second, strict=False)):
        if a.prefill != b.prefill or a.decode != b.decode:
            continue
        lo, hi = sorted((a.seconds, b.seconds))
        seconds = lo if hi > OUTLIER * lo else (lo + hi) / 2.0
        out[i] = TimedStep(b.prefill, b.decode, seconds)
    return out


def _run_scenario(llm: LLM, sc: Scenario, rng: random.Random, steps: list[TimedStep]) -> None:
    llm.scheduler.flush_cache()
    vocab = llm.model.vocab_size
    eos = llm.tokenizer.eos_token_id
    params = SamplingParams(max_tokens=sc.output_tokens, temperature=0.0, ignore_eos=True)
    for _ in range(sc.concurrency):
        ids = [rng.randrange(2, vocab) for _ in range(sc.prompt_tokens)]
        llm.add_request([t if t != eos else 2 for t in ids], params)
    while llm.scheduler.has_work:
        t0 = time.perf_counter()
        out = llm.engine.step(llm.now)
        elapsed = time.perf_counter() - t0
        if out is None:
            break
        llm.now = out.end_s
        for req in out.finished:
            llm.executor.forget(req.rid)
        steps.append(timed_step(out.batch, elapsed))
