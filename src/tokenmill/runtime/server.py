"""The OpenAI-compatible HTTP server: ``/v1/chat/completions``, ``/v1/completions`` (streaming
SSE and not), ``/v1/models``, ``/health`` and Prometheus ``/metrics``.

Robustness: a bad body is a 400 naming the field (every error in the OpenAI shape, FastAPI's own
included); a prompt plus ``max_tokens`` over the context is a 400 with the numbers; a full queue is
a 503 with ``Retry-After``; a request the engine cannot add fails alone, and once the engine thread
has stopped on an error every request is a 503 at once (and ``/health`` says so); a client that
disconnects mid-stream is aborted at once (its slots and pages freed); shutdown drains in-flight
requests. ``echo`` puts the prompt before a completion; ``logprobs`` is refused (not computed).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from tokenmill.runtime.async_engine import AsyncEngine, EngineFailed, QueueFull, Stream, TokenEvent
from tokenmill.runtime.llm import LLM
from tokenmill.runtime.openai_api import ChatCompletionRequest, CompletionRequest, error_body
from tokenmill.runtime.parsers import PARSERS, KimiParser, ParsedDelta
from tokenmill.runtime.sampling import SamplingParams


def _metrics(llm: LLM, engine_ref: dict[str, AsyncEngine]) -> tuple[CollectorRegistry, Histogram, Histogram]:
    reg = CollectorRegistry()
    sched = llm.scheduler
    Gauge("tokenmill_running_requests", "Requests running", registry=reg).set_function(lambda: sched.num_running)
    Gauge("tokenmill_queued_requests", "Requests waiting", registry=reg).set_function(lambda: len(sched.waiting))
    Gauge("tokenmill_kv_pages_used", "KV pages held (running requests and prefix cache)", registry=reg).set_function(
        lambda: sched.pages.num_used
    )
    Gauge("tokenmill_kv_pages_total", "KV pages", registry=reg).set_function(lambda: sched.pages.capacity)
    Gauge(
        "tokenmill_state_slots_used", "State slots held (running requests and prefix cache)", registry=reg
    ).set_function(lambda: sched.slots.num_used if sched.slots else 0)
    Gauge("tokenmill_state_slots_total", "State slots", registry=reg).set_function(
        lambda: sched.slots.capacity if sched.slots else 0
    )
    Gauge("tokenmill_prefix_cache_pages", "KV pages owned by the prefix cache", registry=reg).set_function(
        lambda: sched.cache.cached_pages if sched.cache else 0
    )
    Gauge("tokenmill_prefix_cache_slots", "State slots owned by the prefix cache", registry=reg).set_function(
        lambda: sched.cache.cached_slots if sched.cache else 0
    )
    Gauge("tokenmill_running_request_pages", "KV pages held by running requests", registry=reg).set_function(
        lambda: sched.pages.num_used - (sched.cache.cached_pages if sched.cache else 0)
    )
    Gauge("tokenmill_running_request_slots", "State slots held by running requests", registry=reg).set_function(
        lambda: (sched.slots.num_used if sched.slots else 0) - (sched.cache.cached_slots if sched.cache else 0)
    )
    Gauge(
        "tokenmill_prefix_cache_hit_rate", "Prompt tokens resumed from the cache / prompt tokens admitted", registry=reg
    ).set_function(
        lambda: (
            sched.stats.cached_tokens / sched.stats.prompt_tokens_admitted
            if sched.stats.prompt_tokens_admitted
            else 0.0
        )
    )
    Gauge(
        "tokenmill_in_flight_requests", "Requests accepted by the server and not finished", registry=reg
    ).set_function(lambda: engine_ref["engine"].in_flight if "engine" in engine_ref else 0)
    ttft = Histogram(
        "tokenmill_time_to_first_token_seconds",
        "TTFT",
        registry=reg,
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
    )
    itl = Histogram(
        "tokenmill_inter_token_latency_seconds",
        "Gap between streamed tokens",
        registry=reg,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
    )
    return reg, ttft, itl


def _field_of(error: dict[str, Any]) -> str:
    loc = [str(p) for p in error.get("loc", ()) if p != "body"]
    return ".".join(loc) or "body"


def _json_type(value: Any) -> str:
    """A JSON value's kind, as a client wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list holding a value of another type" if value else "an empty list"
    return "an object"


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, str]:
    """The one-line message and the field of a body pydantic refused. A field of several allowed
    types (``prompt``: a string, token ids or strings) fails once per type, each error's location
    ending in the type's name; those become one message naming the field and every allowed type,
    not the first type's complaint under ``prompt.str``."""
    if not errors:
        return "invalid body", "body"
    locs = [[p for p in e.get("loc", ()) if p != "body"] for e in errors]
    first = locs[0]
    common = 0
    while common < len(first) and all(len(x) > common and x[common] == first[common] for x in locs):
        common += 1
    if len(errors) > 1 and common and all(len(x) > common and isinstance(x[common], str) for x in locs):
        where = ".".join(str(p) for p in first[:common])
        kinds = list(dict.fromkeys(str(x[common]) for x in locs))
        allowed = ", ".join(kinds[:-1]) + " or " + kinds[-1]
        whole = [e.get("input") for e, x in zip(errors, locs, strict=True) if len(x) == common + 1]
        got = f" (got {_json_type(whole[0])})" if whole else ""
        return f"{where}: must be {allowed}{got}", where
    err = errors[0]
    where = _field_of(err)
    return f"{where}: {err.get('msg', 'invalid')}", where


def create_app(
    llm: LLM,
    served_name: str = "tokenmill",
    max_queue: int = 256,
    parser: str = "kimi",
    drain_timeout_s: float = 30.0,
    record_steps: bool = False,
) -> FastAPI:
    if parser not in PARSERS:
        raise ValueError(f"unknown parser {parser!r}; known: {', '.join(PARSERS)}")
    state: dict[str, Any] = {"accepting": True}
    engine_ref: dict[str, AsyncEngine] = {}
    registry, ttft_hist, itl_hist = _metrics(llm, engine_ref)
    tok = llm.tokenizer
    max_positions = int(getattr(llm.model.config, "max_position_embeddings", 0) or 1 << 30)
    context_len = min(max_positions, llm.config.num_pages * llm.config.page_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine_ref["engine"] = AsyncEngine(llm, max_queue, ttft_hist.observe, itl_hist.observe, record_steps)
        yield
        state["accepting"] = False
        await asyncio.to_thread(engine_ref["engine"].shutdown, drain_timeout_s)

    app = FastAPI(title="tokenmill", lifespan=lifespan)
    app.state.engine_ref = engine_ref  # for in-process tools (calibrate local reads its step log)

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if errors and errors[0].get("type") == "json_invalid":
            return JSONResponse(error_body(f"malformed JSON: {errors[0].get('msg', '')}", "body"), status_code=400)
        message, where = _validation_message(errors)
        return JSONResponse(error_body(message, where), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Errors FastAPI raises itself (a body it cannot parse, an unknown route, a wrong method)
        in the OpenAI error shape the rest of the API answers in."""
        param = "body" if exc.status_code == 400 else None
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(
            error_body(str(exc.detail), param, kind=kind, code=exc.status_code),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    def _params(body: Any, prompt_len: int, default_max: int, prompt_field: str) -> SamplingParams | JSONResponse:
        if body.logprobs:
            return JSONResponse(error_body("logprobs: not supported by this server", "logprobs"), status_code=400)
        if prompt_len == 0:
            return JSONResponse(
                error_body(f"{prompt_field}: must contain at least one token", prompt_field), status_code=400
            )
        limit = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
        max_tokens = body.max_completion_tokens or body.max_tokens or min(default_max, context_len - prompt_len)
        if prompt_len + max_tokens > context_len:
            return JSONResponse(
                error_body(
                    f"prompt ({prompt_len} tokens) plus {limit} ({max_tokens}) exceeds the context of "
                    f"{context_len} tokens",
                    limit,
                ),
                status_code=400,
            )
        if max_tokens <= 0:
            return JSONResponse(
                error_body(f"the prompt ({prompt_len} tokens) fills the context of {context_len}", prompt_field),
                status_code=400,
            )
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            ignore_eos=body.ignore_eos or body.min_tokens >= max_tokens,
        )

    def _start(body: Any, ids: list[int], default_max: int, prompt_field: str) -> Stream | JSONResponse:
        """Sampling parameters from the body, then the request into the engine (or the 4xx/5xx)."""
        params = _params(body, len(ids), default_max, prompt_field)
        if isinstance(params, JSONResponse):
            return params
        return _submit(ids, params)

    def _submit(ids: list[int], params: SamplingParams) -> Stream | JSONResponse:
        if not state["accepting"]:
            return JSONResponse(
                error_body("server is shutting down", kind="unavailable", code=503),
                status_code=503,
                headers={"Retry-After": "5"},
            )
        try:
            return engine_ref["engine"].submit(ids, params)
        except QueueFull as exc:
            return JSONResponse(
                error_body(f"queue full: {exc}", kind="overloaded", code=503),
                status_code=503,
                headers={"Retry-After": "1"},
            )
        except EngineFailed as exc:
            return JSONResponse(error_body(str(exc), kind="server_error", code=503), status_code=503)

    async def _events(stream: Stream, request: Request) -> AsyncIterator[TokenEvent]:
        """The stream's events until it finishes. A watcher polls for a client that went away
        (4 times a second, not once per token) and aborts its request; a response cancelled by
        the server (Starlette sees the disconnect first) aborts it on the way out."""

        async def watch() -> None:
            while True:
                await asyncio.sleep(0.25)
                if await request.is_disconnected():
                    engine_ref["engine"].abort(stream.rid)
                    return

        watcher = asyncio.create_task(watch())
        finished = False
        try:
            while True:
                event = await stream.queue.get()
                if event.finish_reason is not None:
                    finished = True
                yield event
                if finished:
                    return
        finally:
            watcher.cancel()
            if not finished:
                engine_ref["engine"].abort(stream.rid)

    async def _collect(stream: Stream, request: Request) -> TokenEvent:
        """All tokens of a non-streamed answer, with the final reason and cached-token count."""
        out = TokenEvent([])
        async for event in _events(stream, request):
            out.token_ids.extend(event.token_ids)
            out.finish_reason, out.cached_tokens = event.finish_reason, event.cached_tokens
        return out

    def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def _finish(reason: str | None, tool_calls: bool) -> str:
        if tool_calls:
            return "tool_calls"
        return "length" if reason == "length" else "stop"

    def _stop_hit(text: str, stop: str | list[str] | None) -> int | None:
        if not stop:
            return None
        stops = [stop] if isinstance(stop, str) else stop
        hits = [text.find(s) for s in stops if s and s in text]
        return min(hits) if hits else None

    @app.get("/health")
    async def health() -> JSONResponse:
        engine = engine_ref.get("engine")
        if engine is None or engine.error is not None:
            return JSONResponse({"status": "error"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.post("/flush_cache")
    async def flush_cache() -> JSONResponse:
        """Evict every prefix-cache entry no request is using (as SGLang's /flush_cache)."""
        done = await asyncio.to_thread(engine_ref["engine"].flush_cache)
        return JSONResponse({"flushed": done}, status_code=200 if done else 503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": served_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "tokenmill",
                        "max_model_len": context_len,
                        # not in OpenAI's schema: lets `tokenmill bench` draw token-id prompts
                        # the model accepts without being told its vocabulary
                        "vocab_size": llm.model.vocab_size,
                    }
                ],
            }
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                return JSONResponse(
                    error_body("prompt: only one prompt per request (n = 1)", "prompt"), status_code=400
                )
            prompt = prompt[0]
        ids = tok.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if any(t < 0 or t >= llm.model.vocab_size for t in ids):
            return JSONResponse(
                error_body(f"prompt: token ids must be in [0, {llm.model.vocab_size})", "prompt"), status_code=400
            )
        stream = _start(body, ids, 16, "prompt")
        if isinstance(stream, JSONResponse):
            return stream
        rid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        include_usage = bool(body.stream_options and body.stream_options.get("include_usage"))
        echoed = (prompt if isinstance(prompt, str) else tok.decode(ids)) if body.echo else ""

        if body.stream:

            async def sse() -> AsyncIterator[str]:
                out: list[int] = []
                text = ""
                cached = 0
                if echoed:  # the prompt first, as its own chunk (OpenAI's echo)
                    choice = {"index": 0, "text": echoed, "logprobs": None, "finish_reason": None}
                    yield f"data: {json.dumps({'id': rid, 'object': 'text_completion', 'created': created, 'model': served_name, 'choices': [choice]})}\n\n"  # noqa: E501
                async for event in _events(stream, request):
                    new, reason, cached = event.token_ids, event.finish_reason, event.cached_tokens
                    if reason is not None and reason.startswith("error"):
                        yield f"data: {json.dumps(error_body(reason, kind='server_error', code=500))}\n\n"
                        return
                    out.extend(new)
                    full = tok.decode(out)
                    delta, text = full[len(text) :], full
                    cut = _stop_hit(text, body.stop)
                    if cut is not None:
                        engine_ref["engine"].abort(stream.rid)
                        delta, reason = delta[: max(0, len(delta) - (len(text) - cut))], "stop"
                    if delta or reason:
                        choice = {
                            "index": 0,
                            "text": delta,
                            "logprobs": None,
                            "finish_reason": None if reason is None else _finish(reason, False),
                        }
                        yield f"data: {json.dumps({'id': rid, 'object': 'text_completion', 'created': created, 'model': served_name, 'choices': [choice]})}\n\n"  # noqa: E501
                    if cut is not None:
                        break
                if include_usage:
                    usage = _usage(len(ids), len(out), cached)
                    yield f"data: {json.dumps({'id': rid, 'object': 'text_completion', 'created': created, 'model': served_name, 'choices': [], 'usage': usage})}\n\n"  # noqa: E501
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")

        final = await _collect(stream, request)
        out, reason, cached = final.token_ids, final.finish_reason, final.cached_tokens
        if reason and reason.startswith("error"):
            return JSONResponse(error_body(reason, kind="server_error", code=500), status_code=500)
        text = tok.decode(out)
        cut = _stop_hit(text, body.stop)
        if cut is not None:
            text, reason = text[:cut], "stop"
        text = echoed + text
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": served_name,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": _finish(reason, False)}],
            "usage": _usage(len(ids), len(out), cached),
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, request: Request) -> Any:
        messages = [
            {"role": m.role, "content": m.text(), "tool_calls": m.tool_calls, "name": m.name} for m in body.messages
        ]
        text = tok.apply_chat_template(messages, tools=body.tools, add_generation_prompt=True)
        ids = tok.encode(text)
        if any(t >= llm.model.vocab_size for t in ids):
            return JSONResponse(
                error_body(
                    f"the tokenizer produced ids beyond the model's vocabulary of {llm.model.vocab_size}",
                    "messages",
                    kind="server_error",
                    code=500,
                ),
                status_code=500,
            )
        stream = _start(body, ids, 1024, "messages")
        if isinstance(stream, JSONResponse):
            return stream
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        include_usage = bool(body.stream_options and body.stream_options.get("include_usage"))
        use_tools = body.tool_choice != "none"

        def chunk(delta: dict[str, Any], finish: str | None) -> str:
            payload = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": served_name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n"

        def tool_dicts(parsed: ParsedDelta, start: int) -> list[dict[str, Any]]:
            return [
                {
                    "index": start + i,
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for i, c in enumerate(parsed.tool_calls)
            ]

        if body.stream:

            async def sse() -> AsyncIterator[str]:
                parser: KimiParser = PARSERS[parser_name]()
                out: list[int] = []
                decoded = ""
                n_calls = 0
                cached = 0
                yield chunk({"role": "assistant", "content": ""}, None)
                async for event in _events(stream, request):
                    new, reason, cached = event.token_ids, event.finish_reason, event.cached_tokens
                    if reason is not None and reason.startswith("error"):
                        yield f"data: {json.dumps(error_body(reason, kind='server_error', code=500))}\n\n"
                        return
                    out.extend(new)
                    full = tok.decode(out)
                    piece, decoded = full[len(decoded) :], full
                    parsed = parser.feed(piece, final=reason is not None)
                    if not use_tools and parsed.tool_calls:
                        parsed.content += "".join(c.arguments for c in parsed.tool_calls)
                        parsed.tool_calls = []
                    if parsed.reasoning:
                        yield chunk({"reasoning_content": parsed.reasoning}, None)
                    if parsed.content:
                        yield chunk({"content": parsed.content}, None)
                    if parsed.tool_calls:
                        yield chunk({"tool_calls": tool_dicts(parsed, n_calls)}, None)
                        n_calls += len(parsed.tool_calls)
                    if reason is not None:
                        yield chunk({}, _finish(reason, n_calls > 0))
                if include_usage:
                    payload = {
                        "id": rid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": served_name,
                        "choices": [],
                        "usage": _usage(len(ids), len(out), cached),
                    }
                    yield f"data: {json.dumps(payload)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")

        final = await _collect(stream, request)
        out, reason, cached = final.token_ids, final.finish_reason, final.cached_tokens
        if reason and reason.startswith("error"):
            return JSONResponse(error_body(reason, kind="server_error", code=500), status_code=500)
        parsed = PARSERS[parser_name]().feed(tok.decode(out), final=True)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls and use_tools:
            message["tool_calls"] = tool_dicts(parsed, 0)
        elif parsed.tool_calls:
            message["content"] = (parsed.content or "") + "".join(c.arguments for c in parsed.tool_calls)
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": served_name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish(reason, bool(message.get("tool_calls"))),
                }
            ],
            "usage": _usage(len(ids), len(out), cached),
        }

    parser_name = parser
    return app
