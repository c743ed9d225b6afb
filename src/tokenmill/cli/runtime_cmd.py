"""``tokenmill generate`` (offline, like ``LLM.generate``) and ``tokenmill serve`` (the
OpenAI-compatible server). Both run the real engine; torch is imported only here."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.options import JsonOpt
from tokenmill.errors import TokenmillError

RtModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="Checkpoint directory (default: the embedded Kimi-Linear-architecture model)."),
]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32|bfloat16")]
MemOpt = Annotated[float, typer.Option("--memory-gib", help="Bytes for the KV and state pools (split by the ratio).")]
PagesOpt = Annotated[int | None, typer.Option("--num-pages", help="Explicit KV pages (with --num-state-slots).")]
SlotsOpt = Annotated[int | None, typer.Option("--num-state-slots", help="Explicit state slots.")]
PageSizeOpt = Annotated[int, typer.Option("--page-size", help="Tokens per KV page (= prefix-cache block).")]
ChunkOpt = Annotated[int, typer.Option("--chunk-tokens", help="Chunked-prefill size.")]
RunningOpt = Annotated[int, typer.Option("--max-running-requests")]
CacheOpt = Annotated[bool, typer.Option("--prefix-cache/--no-prefix-cache")]
RatioOpt = Annotated[float | None, typer.Option("--pool-ratio", help="State pool ÷ KV pool bytes.")]
DeviceOpt = Annotated[
    str, typer.Option("--device", help="auto|cpu|cuda|cuda:N (auto: the GPU when torch sees one, else the CPU).")
]


_ENGINE_FLAGS = (
    "dtype",
    "memory_gib",
    "num_pages",
    "num_state_slots",
    "page_size",
    "chunk_tokens",
    "max_running_requests",
    "prefix_cache",
    "pool_ratio",
    "seed",
    "device",
)


def _engine_options_from(values: dict[str, Any]) -> Any:
    """The engine flags a command declares (``generate``, ``serve``), read from its arguments."""
    return _engine_options(**{k: values[k] for k in _ENGINE_FLAGS})


def _engine_options(
    dtype: str,
    memory_gib: float,
    num_pages: int | None,
    num_state_slots: int | None,
    page_size: int,
    chunk_tokens: int,
    max_running_requests: int,
    prefix_cache: bool,
    pool_ratio: float | None,
    seed: int,
    device: str = "cpu",
) -> Any:
    from tokenmill.runtime.device import device_memory_bytes, resolve_device
    from tokenmill.runtime.llm import EngineOptions

    for name, value in (
        ("--page-size", page_size),
        ("--chunk-tokens", chunk_tokens),
        ("--max-running-requests", max_running_requests),
    ):
        if value <= 0:
            raise TokenmillError(f"{name} must be a positive integer (got {value})")
    from tokenmill.hardware.local import physical_memory_bytes

    device = resolve_device(device)
    on_gpu = device_memory_bytes(device)
    have_gib = (on_gpu if on_gpu is not None else physical_memory_bytes()) / 1024**3
    where = f"the {have_gib:.1f} GiB of {device}" if on_gpu is not None else f"this machine's {have_gib:.1f} GiB"
    if not 0 < memory_gib <= have_gib:  # also refuses nan and inf
        raise TokenmillError(f"--memory-gib must be > 0 and at most {where} (got {memory_gib})")
    from tokenmill.plan.layout import check_pool_ratio

    check_pool_ratio(pool_ratio)
    return EngineOptions(
        dtype=dtype,
        memory_gib=memory_gib,
        num_pages=num_pages,
        num_state_slots=num_state_slots,
        page_size=page_size,
        chunk_tokens=chunk_tokens,
        max_running_requests=max_running_requests,
        prefix_cache=prefix_cache,
        pool_ratio=pool_ratio,
        seed=seed,
        device=device,
    )


def generate(
    model: RtModelOpt = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="Prompt text.")] = None,
    prompt_token_ids: Annotated[str | None, typer.Option("--prompt-token-ids", help="Comma-separated ids.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 16,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k")] = 0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos")] = False,
    dtype: DtypeOpt = "float32",
    memory_gib: MemOpt = 0.25,
    num_pages: PagesOpt = None,
    num_state_slots: SlotsOpt = None,
    page_size: PageSizeOpt = 16,
    chunk_tokens: ChunkOpt = 2048,
    max_running_requests: RunningOpt = 16,
    prefix_cache: CacheOpt = True,
    pool_ratio: RatioOpt = None,
    device: DeviceOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Generate offline from a prompt: prints the text, or {"token_ids": [...], "text": "..."} with --json."""
    if (prompt is None) == (prompt_token_ids is None):
        raise TokenmillError("give exactly one of --prompt and --prompt-token-ids")
    ids: list[int] | None = None
    if prompt_token_ids is not None:
        try:
            ids = [int(t) for t in prompt_token_ids.split(",") if t.strip()]
        except ValueError:
            raise TokenmillError(
                f"--prompt-token-ids must be comma-separated integers (got {prompt_token_ids!r})"
            ) from None
        if not ids:
            raise TokenmillError("--prompt-token-ids is empty")
    if prompt is not None:
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes the shell passed that are not UTF-8 (kept as surrogates)
            raise TokenmillError(f"--prompt is not UTF-8 text (a byte at character {exc.start} is not)") from None
    from tokenmill.runtime.llm import LLM, check_token_ids
    from tokenmill.runtime.sampling import SamplingParams

    try:
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, ignore_eos=ignore_eos
        )
    except TokenmillError as exc:  # its messages name the API's fields (max_tokens …); here they are flags
        field, _, rest = str(exc).partition(" ")
        raise TokenmillError(f"--{field.replace('_', '-')} {rest}") from None
    opts = _engine_options_from(locals())
    llm = LLM(model, opts)
    if ids is not None:
        check_token_ids(ids, llm.model.vocab_size, "--prompt-token-ids")
    prompts: list[list[int]] | list[str] = [ids] if ids is not None else [prompt or ""]
    out = llm.generate(prompts, params)[0]
    if json_out:
        print(
            json.dumps(
                {
                    "token_ids": out.token_ids,
                    "text": out.text,
                    "finish_reason": out.finish_reason,
                    "prompt_token_ids": out.prompt_token_ids,
                }
            )
        )
    else:
        print(out.text)


def serve(
    model: RtModelOpt = None,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    served_model_name: Annotated[str | None, typer.Option("--served-model-name")] = None,
    max_queue: Annotated[int, typer.Option("--max-queue", help="Queued + running requests before 503.")] = 256,
    parser: Annotated[str, typer.Option("--parser", help="Reasoning/tool-call parser: kimi|none.")] = "kimi",
    dtype: DtypeOpt = "float32",
    memory_gib: MemOpt = 1.0,
    num_pages: PagesOpt = None,
    num_state_slots: SlotsOpt = None,
    page_size: PageSizeOpt = 16,
    chunk_tokens: ChunkOpt = 2048,
    max_running_requests: RunningOpt = 64,
    prefix_cache: CacheOpt = True,
    pool_ratio: RatioOpt = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: DeviceOpt = "auto",
) -> None:
    """Serve a model over the OpenAI API (chat, completions, streaming), with /health and /metrics."""
    if not 0 < port < 65536:
        raise TokenmillError(f"--port must be in 1..65535 (got {port})")
    if not host.strip() or any(c.isspace() for c in host):
        # an empty host would bind every interface: say it (0.0.0.0) rather than mistype it
        raise TokenmillError(f"--host must be an address or a name, e.g. 127.0.0.1 or 0.0.0.0 (got {host!r})")
    if max_queue <= 0:
        raise TokenmillError(f"--max-queue must be positive (got {max_queue})")
    import uvicorn

    from tokenmill.runtime.llm import LLM
    from tokenmill.runtime.parsers import PARSERS
    from tokenmill.runtime.server import create_app

    if parser not in PARSERS:
        raise TokenmillError(f"--parser must be one of {'|'.join(PARSERS)} (got {parser!r})")
    opts = _engine_options_from(locals())
    llm = LLM(model, opts)
    name = served_model_name or (Path(str(model)).name if model else "tokenmill-default")
    app = create_app(llm, served_name=name, max_queue=max_queue, parser=parser)
    uvicorn.run(app, host=host, port=port, log_level="warning")
