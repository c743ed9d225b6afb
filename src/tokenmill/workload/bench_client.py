"""Load generator: drive an OpenAI-compatible server with a ``Workload``, measured as bench_serving does.

What is sent (reference §6):

- Streaming requests (``stream: true``, ``stream_options: {"include_usage": true}``) to
  ``/v1/completions`` or ``/v1/chat/completions``, with ``max_tokens`` = the request's output
  tokens, ``temperature: 0``, and the SGLang/vLLM extensions ``ignore_eos: true`` and
  ``min_tokens`` = ``max_tokens`` so the answer has the workload's length. A server that rejects
  unknown fields answers 400; that request is counted as failed (its message in ``errors``).
- Prompts are synthesized: a workload gives token counts and content ids, not text. Each full
  prompt block with a content id gets ``block_tokens`` token ids derived only from that id and the
  seed (SplitMix64, in ``[0, vocab)``), so two requests whose ``block_ids`` share a prefix send
  the same leading tokens and a server's prefix cache sees what the workload intends. The rest of a
  prompt (a partial last block, blocks without an id) is private to the request, except that a
  session turn's partial last block is taken from the block the *next* turn has at that place
  when the next turn extends this one: then a later turn's prompt starts with the whole earlier
  prompt, token for token. The earlier turn's *answer* is not replayed (the client does not know
  the generated token ids); the next turn carries synthetic tokens in its place, so a server
  caching prompt + output reuses the earlier prompt only.
- ``completions`` sends ``prompt`` as the token-id list (SGLang and vLLM accept it), so prompt
  lengths are exact. ``chat`` sends one user message whose text is one common English word per
  token id (``_WORDS[id % len(_WORDS)]``, space separated). Each word is one token in the usual BPE
  tokenizers, so the prompt is about ``prompt_tokens`` tokens plus the chat template's few; the
  count is approximate (the server's ``usage.prompt_tokens`` is what the summary reports). Equal id
  prefixes give equal text prefixes, so prefix sharing survives.

How it is measured (SGLang ``bench_serving``): TTFT is the time to the first chunk carrying
non-empty ``text`` / ``delta.content`` / ``delta.reasoning_content`` / ``delta.reasoning`` /
``delta.tool_calls``; each such chunk's arrival time goes in ``token_times_s`` (ITL = the gaps);
E2E ends when the response body ends (after ``data: [DONE]``); the output length is the final
``usage.completion_tokens`` when the server sends it, else the number of content chunks;
TPOT = (E2E − TTFT)/(output − 1).
A request fails (``RequestOutcome.error``) on a connection error, an HTTP status other than 200,
a malformed SSE line, an ``error`` object in the stream, a stream that ends without ``[DONE]`` or
carries no output at all (vLLM's client fails those too: there is no TTFT), or when it runs past
``timeout_s``.

When requests are sent follows ``Workload``: open loop sends each session's first turn at its
``arrival_s``; closed loop runs ``concurrency`` clients that each take the next session in
workload order and send its turns one after the other (as bench_serving's ``--max-concurrency``
semaphore with ``--request-rate inf``). Either way a later turn is sent ``think_time_s`` after
the previous turn of its session completes (or fails).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_positive, show
from tokenmill.workload.metrics import summarize
from tokenmill.workload.request import RequestSpec, Workload, content_block_ids
from tokenmill.workload.slo import SLO, RequestOutcome

ENDPOINTS = ("completions", "chat")
#: Default range of synthetic token ids: every common tokenizer has at least 32,000 entries.
DEFAULT_VOCAB = 32_000

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

#: Words that are one token (with their leading space) in GPT-2/cl100k/o200k, Llama, Qwen and
#: DeepSeek tokenizers; the chat prompt is one of these per synthetic token id.
_WORD_TEXT = """the of and to in is that for it as was with be by on not he this are or his from at which
    but have an had they you were their one all we can her has there been if more when will would
    who so no she other its may these what them than some him time into only do could new about
    two first then also after our any man most over made like such way very well year work where
    should each many must people before through back much just those said good see how long day
    little still own great old world life same another right up three down part place last number
    small might while found thing both under never city house know water left end give point hand
    high off few year open case show fact group line under state"""
_WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))


# ---------------------------------------------------------------- configuration and results


@dataclass(frozen=True)
class BenchConfig:
    """Where to send and how: server, model name, endpoint, prompt synthesis and timeout."""

    base_url: str
    model: str
    endpoint: str = "completions"
    seed: int = 0
    vocab: int = DEFAULT_VOCAB
    timeout_s: float = 600.0
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_base_url(self.base_url)
        if not isinstance(self.model, str) or not self.model.strip():
            raise TokenmillError("--model must be a non-empty model name")
        if self.endpoint not in ENDPOINTS:
            raise TokenmillError(f"--endpoint must be one of {'|'.join(ENDPOINTS)} (got {show(self.endpoint)})")
        check_int("--seed", self.seed, 0)
        check_int("--tokenizer-vocab", self.vocab, 1)
        check_positive("--timeout-s", self.timeout_s)

    @property
    def url(self) -> str:
        """The endpoint URL: ``base_url`` + ``/v1/completions`` (a ``/v1`` already there is kept)."""
        return v1_url(self.base_url, "completions" if self.endpoint == "completions" else "chat/completions")

    @property
    def backend(self) -> str:
        """bench_serving's backend name for the endpoint: ``openai`` or ``openai-chat``."""
        return "openai" if self.endpoint == "completions" else "openai-chat"


def check_base_url(base_url: object) -> None:
    """Refuse a ``--base-url`` that is not an http:// or https:// URL."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise TokenmillError(f"--base-url must be an http:// or https:// URL (got {show(base_url)})")


def v1_url(base_url: str, route: str) -> str:
    """``base_url`` + ``/v1/`` + ``route`` (a ``/v1`` the base already ends with is kept)."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return f"{base}/{route}"


def served_models(base_url: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The entries of the server's ``GET /v1/models`` (each a dict with a non-empty ``id``), as
    vLLM's bench client asks for them when no model is named. A server that cannot be reached,
    answers anything but 200, or sends something other than an OpenAI model list is one
    ``TokenmillError`` naming the URL."""
    import httpx

    url = v1_url(base_url, "models")
    try:
        response = httpx.get(url, timeout=timeout_s)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise TokenmillError(f"GET {url} failed ({type(exc).__name__}: {detail})") from None
    if response.status_code != 200:
        raise TokenmillError(f"GET {url} answered HTTP {response.status_code}")
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list):
        raise TokenmillError(f"GET {url} did not answer an OpenAI model list")
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"].strip()]


def reported_vocab(entries: Sequence[dict[str, Any]], model: str) -> int | None:
    """The ``vocab_size`` the model list reports for ``model`` (``tokenmill serve`` does; OpenAI,
    vLLM and SGLang do not), or None."""
    for entry in entries:
        if entry["id"] == model:
            size = entry.get("vocab_size")
            if isinstance(size, int) and not isinstance(size, bool) and size >= 2:
                return size
            return None
    return None


@dataclass(frozen=True)
class BenchResult:
    """What a run produced: outcomes in workload order (times in seconds from the run's start)."""

    workload: Workload
    outcomes: tuple[RequestOutcome, ...]
    duration_s: float
    max_in_flight: int
    server_prompt_tokens: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- prompt synthesis


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def block_token_ids(keys: Sequence[int], block_tokens: int, seed: int, vocab: int) -> npt.NDArray[np.int64]:
    """``block_tokens`` token ids for each content key, a function of (key, seed, offset) only."""
    salt = int(_mix(np.array([seed & _MASK64], dtype=np.uint64))[0])
    k = np.array([(int(key) ^ salt) & _MASK64 for key in keys], dtype=np.uint64)
    offsets = np.arange(1, block_tokens + 1, dtype=np.uint64) * np.uint64(_GAMMA)
    with np.errstate(over="ignore"):
        z = _mix(k[:, None] + offsets[None, :])
    return (z % np.uint64(vocab)).astype(np.int64).reshape(-1)


class PromptSynth:
    """Deterministic prompts for a workload's requests (see the module docstring)."""

    def __init__(self, workload: Workload, seed: int = 0, vocab: int = DEFAULT_VOCAB) -> None:
        self.block_tokens = workload.block_tokens
        self.seed = seed
        self.vocab = vocab
        self._tail_key: dict[str, int] = {}
        for turns in workload.sessions().values():
            for prev, nxt in itertools.pairwise(turns):
                m = len(prev.block_ids)
                partial = prev.prompt_tokens // self.block_tokens == m and prev.prompt_tokens % self.block_tokens
                if partial and len(nxt.block_ids) > m and nxt.block_ids[:m] == prev.block_ids:
                    self._tail_key[prev.request_id] = nxt.block_ids[m]

    def token_ids(self, spec: RequestSpec) -> list[int]:
        """The prompt as token ids in ``[0, vocab)``, ``max(1, prompt_tokens)`` of them."""
        n = max(1, spec.prompt_tokens)
        b = self.block_tokens
        n_blocks = -(-n // b)
        keys = list(spec.block_ids[:n_blocks])
        if len(keys) < n_blocks:
            private = content_block_ids(f"tokenmill-bench/{spec.request_id}", n_blocks * b, b)
            tail = self._tail_key.get(spec.request_id)
            if tail is not None and len(keys) == n_blocks - 1:
                keys.append(tail)
            keys.extend(private[len(keys) :])
        ids: list[int] = block_token_ids(keys, b, self.seed, self.vocab)[:n].tolist()
        return ids

    def text(self, spec: RequestSpec) -> str:
        """The prompt as words, one per token id (about one token each)."""
        return " ".join(_WORDS[t % len(_WORDS)] for t in self.token_ids(spec))


def request_body(spec: RequestSpec, synth: PromptSynth, config: BenchConfig) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    max_tokens = max(1, spec.output_tokens)
    body: dict[str, Any] = {"model": config.model}
    if config.endpoint == "completions":
        body["prompt"] = synth.token_ids(spec)
    else:
        body["messages"] = [{"role": "user", "content": synth.text(spec)}]
    body |= {
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": config.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body |= config.extra_body
    return body


# ---------------------------------------------------------------- choosing the requests


def select_requests(workload: Workload, n: int, *, min_sessions: int = 1, concurrency: int | None = None) -> Workload:
    """Exactly ``n`` requests of ``workload``, whole sessions kept as far as possible.

    Takes the fewest leading sessions (a request without a session is a one-turn session) that
    hold ``n`` turns and number at least ``min(min_sessions, n)``, then drops the last turns of the
    longest of them until ``n`` remain (a session keeps at least its first turn). The result has
    ``concurrency`` clients (``None``: open loop, every first turn needs an ``arrival_s``).
    """
    check_int("--num-prompts", n, 1)
    groups: list[list[RequestSpec]] = []
    index: dict[str, int] = {}
    for r in workload.requests:
        if r.session_id is not None and r.session_id in index:
            groups[index[r.session_id]].append(r)
            continue
        if r.session_id is not None:
            index[r.session_id] = len(groups)
        groups.append([r])
    if len(workload.requests) < n:
        raise TokenmillError(
            f"--num-prompts {n} is more than the {len(workload.requests)} requests of workload {workload.name!r}"
        )
    want = min(min_sessions, n, len(groups))
    total = count = 0
    while total < n or count < want:
        total += len(groups[count])
        count += 1
    lengths = [len(g) for g in groups[:count]]
    cap = max(1, max(t for t in range(1, max(lengths) + 1) if sum(min(x, t) for x in lengths) <= n))
    caps = [min(x, cap) for x in lengths]
    extra = n - sum(caps)
    for i, x in enumerate(lengths):
        if extra and x > cap:
            caps[i] += 1
            extra -= 1
    keep = {r.request_id for g, c in zip(groups, caps, strict=False) for r in g[:c]}
    chosen = tuple(r for r in workload.requests if r.request_id in keep)
    return Workload(name=workload.name, requests=chosen, block_tokens=workload.block_tokens, concurrency=concurrency)


# ---------------------------------------------------------------- one request


class _Failed(Exception):
    """A request that did not complete; the message goes into ``RequestOutcome.error``."""


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _http_error(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        err = json.loads(text)
        msg = err.get("error", err) if isinstance(err, dict) else err
        if isinstance(msg, dict):
            msg = msg.get("message", msg)
        text = str(msg) if msg else text
    except json.JSONDecodeError:
        pass
    return _one_line(f"HTTP {status}: {text}" if text.strip() else f"HTTP {status}")


def _has_piece(choice: dict[str, Any]) -> tuple[bool, bool]:
    """(carries output, is a tool-call delta) for one streamed choice."""
    if choice.get("text"):
        return True, False
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False, False
    if delta.get("tool_calls"):
        return True, True
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")), False


@dataclass
class _Stream:
    first: float | None = None
    times: list[float] = field(default_factory=list)
    chunks: int = 0
    tool: bool = False
    usage_out: int | None = None
    usage_in: int | None = None
    cached: int = 0
    done: bool = False
    finish_reason: str | None = None

    def feed(self, line: str, now: float) -> None:
        line = line.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            return  # blank separators, comments, event:/id:/retry: fields
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            raise _Failed(_one_line(f"malformed SSE data: {data}", 120)) from None
        if not isinstance(obj, dict):
            raise _Failed(_one_line(f"malformed SSE data (not an object): {data}", 120))
        if obj.get("error"):
            err = obj["error"]
            raise _Failed(_one_line(f"error in stream: {err.get('message', err) if isinstance(err, dict) else err}"))
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise _Failed(_one_line(f"malformed SSE data (choices is not a list): {data}", 120))
        piece = False
        for choice in choices:
            if isinstance(choice, dict):
                has, tool = _has_piece(choice)
                piece |= has
                self.tool |= tool
                if choice.get("finish_reason"):
                    self.finish_reason = str(choice["finish_reason"])
        if piece:
            self.first = now if self.first is None else self.first
            self.times.append(now)
            self.chunks += 1
        usage = obj.get("usage")
        if isinstance(usage, dict):
            out, inp = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if isinstance(out, int) and out >= 0:
                self.usage_out = out
            if isinstance(inp, int) and inp >= 0:
                self.usage_in = inp
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if isinstance(cached, int) and cached >= 0:
                self.cached = cached


_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


async def _send(client: Any, spec: RequestSpec, body: bytes, config: BenchConfig, t0: float) -> _Record:
    import httpx

    send = time.perf_counter() - t0
    st = _Stream()
    error: str | None = None
    finish: float | None = None
    try:
        async with asyncio.timeout(config.timeout_s):
            async with client.stream("POST", config.url, content=body, headers=_HEADERS) as resp:
                if resp.status_code != 200:
                    raise _Failed(_http_error(resp.status_code, (await resp.aread())[:2000]))
                # Read to the end of the body (after [DONE]) so the connection goes back to the pool.
                async for line in resp.aiter_lines():
                    if not st.done:
                        st.feed(line, time.perf_counter() - t0)
            finish = time.perf_counter() - t0
        if not st.done:
            raise _Failed("stream ended without data: [DONE]")
        if st.first is None:  # as vLLM's client: no TTFT to measure, so not a completed request
            reason = f" (finish_reason {st.finish_reason!r})" if st.finish_reason else ""
            raise _Failed(f"the stream carried no output{reason}")
    except _Failed as exc:
        error = str(exc)
    except TimeoutError:
        if not st.done:
            error = f"timeout: no complete answer within --timeout-s {config.timeout_s:g} s"
    except httpx.HTTPError as exc:
        error = _one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    except Exception as exc:  # never let one request end the run
        while isinstance(exc, ExceptionGroup) and exc.exceptions:  # say what failed, not "a TaskGroup"
            exc = exc.exceptions[0]
        error = _one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    if finish is None or error is not None:
        finish = time.perf_counter() - t0
    outcome = RequestOutcome(
        request_id=spec.request_id,
        send_s=send,
        first_token_s=st.first,
        finish_s=finish,
        token_times_s=tuple(st.times),
        prompt_tokens=st.usage_in if st.usage_in is not None else spec.prompt_tokens,
        output_tokens=st.usage_out if st.usage_out is not None else st.chunks,
        cached_tokens=st.cached,
        tool_call=spec.tool_call or st.tool,
        error=error,
    )
    return _Record(outcome, st.usage_in)


@dataclass(frozen=True)
class _Record:
    outcome: RequestOutcome
    server_prompt_tokens: int | None


# ---------------------------------------------------------------- the run


def _sessions(workload: Workload) -> list[list[RequestSpec]]:
    groups: list[list[RequestSpec]] = []
    index: dict[str, int] = {}
    for r in workload.requests:
        if r.session_id is None:
            groups.append([r])
        elif r.session_id in index:
            groups[index[r.session_id]].append(r)
        else:
            index[r.session_id] = len(groups)
            groups.append([r])
    return groups


async def run_workload(
    workload: Workload,
    config: BenchConfig,
    *,
    transport: Any = None,
    on_done: Callable[[RequestOutcome], None] | None = None,
) -> BenchResult:
    """Send every request of ``workload`` to the server and record what happened.

    ``transport`` (an ``httpx.AsyncBaseTransport``) replaces the network, for tests.
    ``on_done`` is called with each outcome as it completes (a progress bar).
    """
    import httpx

    synth = PromptSynth(workload, config.seed, config.vocab)
    # Bodies are built and encoded before the clock starts, so no prompt synthesis or JSON
    # encoding blocks the event loop while streams are being timed (~6 bytes per prompt token).
    bodies = {
        r.request_id: json.dumps(request_body(r, synth, config), separators=(",", ":")).encode()
        for r in workload.requests
    }
    records: dict[str, _Record] = {}
    in_flight = peak = 0
    t0 = time.perf_counter()

    async def sleep_until(at: float) -> None:
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    async def one(client: httpx.AsyncClient, spec: RequestSpec) -> None:
        nonlocal in_flight, peak
        body = bodies.pop(spec.request_id)
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            rec = await _send(client, spec, body, config, t0)
        finally:
            in_flight -= 1
        records[spec.request_id] = rec
        if on_done is not None:
            on_done(rec.outcome)

    async def session(client: httpx.AsyncClient, turns: list[RequestSpec]) -> None:
        if turns[0].arrival_s is not None:
            await sleep_until(turns[0].arrival_s)
        for k, spec in enumerate(turns):
            if k and spec.think_time_s > 0:
                await asyncio.sleep(spec.think_time_s)
            await one(client, spec)

    sessions = _sessions(workload)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(None)  # asyncio.timeout(config.timeout_s) bounds each whole request
    async with httpx.AsyncClient(limits=limits, timeout=timeout, transport=transport, trust_env=False) as client:
        t0 = time.perf_counter()
        if workload.concurrency is None:
            await asyncio.gather(*(session(client, turns) for turns in sessions))
        else:
            queue = iter(sessions)

            async def worker() -> None:
                for turns in queue:
                    await session(client, turns)

            await asyncio.gather(*(worker() for _ in range(min(workload.concurrency, len(sessions)))))
        duration = time.perf_counter() - t0
    outcomes = tuple(records[r.request_id].outcome for r in workload.requests)
    server_in = {rid: v for rid, rec in records.items() if (v := rec.server_prompt_tokens) is not None}
    return BenchResult(workload, outcomes, duration, peak, server_in)


def run(
    workload: Workload,
    config: BenchConfig,
    *,
    transport: Any = None,
    on_done: Callable[[RequestOutcome], None] | None = None,
) -> BenchResult:
    """``run_workload`` from synchronous code (its own event loop)."""
    return asyncio.run(run_workload(workload, config, transport=transport, on_done=on_done))


# ---------------------------------------------------------------- reporting


def bench_summary(
    result: BenchResult,
    config: BenchConfig,
    slo: SLO,
    *,
    dataset_name: str,
    request_rate: float | None,
    max_concurrency: int | None,
    extra: dict[str, Any] | None = None,
    burstiness: float = 1.0,
    percentile_metrics: Sequence[str] = (),
    metric_percentiles: Sequence[float] = (),
) -> dict[str, Any]:
    """bench_serving's result object: run description, then ``summarize``'s metrics, then errors.

    ``request_rate`` None or inf is written ``"inf"`` (as vLLM does; JSON has no infinity);
    ``burstiness`` is written as vLLM writes it (1.0 for Poisson, and for runs without a rate);
    ``max_concurrency`` None means no cap. ``percentile_metrics`` × ``metric_percentiles`` add
    vLLM's ``p{P}_{metric}_ms`` keys (``summarize``). ``errors`` lists the failed requests' messages.
    """
    rate: float | str = "inf" if request_rate is None or math.isinf(request_rate) else request_rate
    out: dict[str, Any] = {
        "backend": config.backend,
        "base_url": config.base_url,
        "model_id": config.model,
        "endpoint": config.url,
        "dataset_name": dataset_name,
        "num_prompts": len(result.outcomes),
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "seed": config.seed,
        "slo_ttft_ms": slo.ttft_ms,
        "slo_tpot_ms": slo.tpot_ms,
    }
    out |= extra or {}
    out |= summarize(
        result.outcomes,
        result.duration_s,
        slo,
        percentile_metrics=percentile_metrics,
        metric_percentiles=metric_percentiles,
    )
    out["max_in_flight"] = result.max_in_flight
    out["errors"] = [f"{o.request_id}: {o.error}" for o in result.outcomes if o.error is not None]
    return out


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 3)


def request_details(result: BenchResult) -> dict[str, Any]:
    """Per-request data: vLLM/SGLang's detail lists (seconds) and one record per request."""
    specs = {r.request_id: r for r in result.workload.requests}
    rows = []
    for o in result.outcomes:
        s = specs[o.request_id]
        rows.append(
            {
                "request_id": o.request_id,
                "session_id": s.session_id,
                "turn": s.turn,
                "send_s": round(o.send_s, 6),
                "ttft_ms": _ms(o.ttft_s),
                "tpot_ms": _ms(o.tpot_s),
                "e2e_ms": _ms(o.e2e_s),
                "chunks": len(o.token_times_s),
                "prompt_tokens": s.prompt_tokens,
                "server_prompt_tokens": result.server_prompt_tokens.get(o.request_id),
                "cached_tokens": o.cached_tokens,
                "expected_output_tokens": s.output_tokens,
                "output_tokens": o.output_tokens,
                "tool_call": o.tool_call,
                "error": o.error,
            }
        )
    return {
        "input_lens": [o.prompt_tokens for o in result.outcomes],
        "output_lens": [o.output_tokens for o in result.outcomes],
        "ttfts": [o.ttft_s or 0.0 for o in result.outcomes],
        "itls": [list(o.itls_s) for o in result.outcomes],
        "requests": rows,
    }
