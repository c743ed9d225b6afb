"""Read an SGLang, vLLM or TensorRT-LLM launch command back into tokenmill's layout flags (``--launch``).

The inverse of ``plan.launch``: a serving engineer has a command that runs, and wants its memory
plan and its predicted latency without spelling the layout again in tokenmill's words. The
reading is the engine's, not tokenmill's: a size the command does not give is the engine's
default (SGLang and vLLM start one GPU of tensor parallelism unless told otherwise), vLLM's
``--gpu-memory-utilization`` defaults to 0.9, and SGLang's ``--dp-size`` without
``--enable-dp-attention`` starts that many replicas. What the command leaves to the engine and
tokenmill cannot know (SGLang's memory fraction, chosen by GPU at start) keeps tokenmill's
default, and a note says so.

Flags that change neither memory nor time (parsers, addresses, logging) are listed as not read;
flags tokenmill has no model for (attention backends, CUDA-graph sizes) as not modelled. Values
come back as the strings and numbers tokenmill's own flags take, so the checks behind those flags
(``cli.options.layout_from_flags``) refuse what they would refuse from the command line.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tokenmill.errors import TokenmillError

__all__ = ["LaunchReading", "read_launch"]

#: Flags that change neither the memory plan nor the time of a step.
_NO_EFFECT = frozenset(
    {
        "--host",
        "--port",
        "--trust-remote-code",
        "--reasoning-parser",
        "--tool-call-parser",
        "--served-model-name",
        "--tokenizer-path",
        "--tokenizer",
        "--node-rank",
        "--dist-init-addr",
        "--dist-timeout",
        "--master-addr",
        "--master-port",
        "--enable-metrics",
        "--log-level",
        "--log-requests",
        "--api-key",
        "--chat-template",
        "--speculative-draft-model-path",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--download-dir",
        "--revision",
        "--seed",
        "--random-seed",
        "--uvicorn-log-level",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
    }
)
#: Flags that never take a value (the others take the next token unless it is a flag).
_SWITCHES = frozenset(
    {
        "--trust-remote-code",
        "--enable-metrics",
        "--enable-dp-attention",
        "--disable-radix-cache",
        "--enable-linear-replayssm-spec",
        "--enable-expert-parallel",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--log-requests",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--enforce-eager",
        "--disable-cuda-graph",
        "--enable-mixed-chunk",
    }
)
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class LaunchReading:
    """What a launch command starts: the engine, the model it loads, tokenmill's layout flags
    (``cli.options`` keys) it sets, the GPUs it uses, and the flags it does not read."""

    engine: str  # "sglang", "vllm" or "trtllm"
    model: str | None
    flags: dict[str, Any]
    gpus: int  # a worker's tp × pp, times SGLang's DP replicas
    nnodes: int | None = None
    not_read: tuple[str, ...] = ()  # flags with no effect on memory or time
    not_modelled: tuple[str, ...] = ()  # flags that may have one, which tokenmill does not model
    notes: tuple[str, ...] = ()


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise TokenmillError(f"--launch: cannot split the command ({exc})") from None


def _engine(tokens: list[str]) -> tuple[str, list[str]]:
    """The engine and the tokens after its entry point (environment assignments skipped)."""
    i = 0
    while i < len(tokens) and _ENV.match(tokens[i]):
        i += 1
    rest = tokens[i:]
    heads = {
        ("sglang", "serve"): "sglang",
        ("vllm", "serve"): "vllm",
        ("trtllm-serve", "serve"): "trtllm",
    }
    if tuple(rest[:2]) in heads:
        return heads[(rest[0], rest[1])], rest[2:]
    if rest[:1] == ["trtllm-serve"]:  # the subcommand is optional: `trtllm-serve MODEL …`
        return "trtllm", rest[1:]
    if len(rest) >= 3 and re.fullmatch(r"(.*/)?python(3(\.\d+)?)?", rest[0]) and rest[1] == "-m":
        if rest[2] == "sglang.launch_server":
            return "sglang", rest[3:]
        if rest[2] == "vllm.entrypoints.openai.api_server":
            return "vllm", rest[3:]
    got = " ".join(rest[:3]) or "nothing"
    raise TokenmillError(
        "--launch must start with `sglang serve`, `python -m sglang.launch_server`, `vllm serve`, "
        f"`python -m vllm.entrypoints.openai.api_server` or `trtllm-serve` (got {got!r})"
    )


def _options(args: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """Positional arguments and ``--flag → value`` (None for a switch); ``--a=b`` and ``--a_b`` read
    as ``--a b`` and ``--a-b``. A flag given twice is refused: which one an engine takes is its
    parser's business, and a command that says both is not one to plan from."""
    positional: list[str] = []
    opts: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        name, eq, value = tok.partition("=")
        name = "--" + name.lstrip("-").replace("_", "-") if name.startswith("--") else name
        val: str | None = value if eq else None
        if not eq and name not in _SWITCHES and i < len(args) and not args[i].startswith("--"):
            val = args[i]
            i += 1
        if name in opts:
            raise TokenmillError(f"--launch gives {name} twice")
        opts[name] = val
    return positional, opts


def _int(opts: dict[str, str | None], *names: str) -> int | None:
    for name in names:
        if name in opts:
            raw = opts[name]
            if raw is None:
                raise TokenmillError(f"--launch: {name} needs a value")
            if not raw.strip().lstrip("+").isdigit() or not raw.isascii():
                raise TokenmillError(f"--launch: {name} must be a positive integer (got {raw!r})")
            value = int(raw)
            if value < 1:
                raise TokenmillError(f"--launch: {name} must be a positive integer (got {raw!r})")
            return value
    return None


def _float(opts: dict[str, str | None], name: str) -> float | None:
    if name not in opts:
        return None
    raw = opts[name]
    if raw is None:
        raise TokenmillError(f"--launch: {name} needs a value")
    try:
        return float(raw)
    except ValueError:
        raise TokenmillError(f"--launch: {name} must be a number (got {raw!r})") from None


def _text(opts: dict[str, str | None], name: str) -> str | None:
    if name not in opts:
        return None
    raw = opts[name]
    if raw is None or not raw.strip():
        raise TokenmillError(f"--launch: {name} needs a value")
    return raw.strip()


def _kv_dtype(raw: str | None) -> str | None:
    """An engine's KV-cache dtype in tokenmill's words (``fp8_e5m2`` is as many bytes as e4m3)."""
    if raw is None:
        return None
    key = raw.lower()
    return "fp8_e4m3" if key in ("fp8", "fp8_e4m3", "fp8_e5m2") else key


def _quantization(raw: str | None) -> str | None:
    if raw is None:
        return None
    key = raw.lower()
    if key in ("fp8", "modelopt_fp4", "nvfp4", "modelopt"):
        return {"modelopt_fp4": "nvfp4", "modelopt": "fp8"}.get(key, key)
    raise TokenmillError(f"--launch: --quantization {raw!r} is not one tokenmill plans (fp8, modelopt_fp4)")


_READ_SGLANG = frozenset(
    {
        "--model-path",
        "--model",
        "--tp-size",
        "--tensor-parallel-size",
        "--tp",
        "--ep-size",
        "--expert-parallel-size",
        "--ep",
        "--pp-size",
        "--pipeline-parallel-size",
        "--pp",
        "--dp-size",
        "--data-parallel-size",
        "--dp",
        "--enable-dp-attention",
        "--dcp-size",
        "--mem-fraction-static",
        "--kv-cache-dtype",
        "--page-size",
        "--swa-full-tokens-ratio",
        "--disable-hybrid-swa-memory",
        "--disable-radix-cache",
        "--mamba-radix-cache-strategy",
        "--mamba-full-memory-ratio",
        "--mamba-ssm-dtype",
        "--max-running-requests",
        "--moe-a2a-backend",
        "--quantization",
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-dspark-block-size",
        "--enable-linear-replayssm-spec",
        "--nnodes",
    }
)


def _speculation(algorithm: str | None, steps: int | None, block: int | None) -> str | None:
    if algorithm is None:
        return None
    algo = algorithm.upper()
    if algo == "DSPARK":
        if block is None:
            raise TokenmillError("--launch: --speculative-algorithm DSPARK needs --speculative-dspark-block-size")
        return f"dspark:{block}"
    if algo in ("EAGLE", "EAGLE3", "NEXTN", "MTP"):
        if steps is None:
            raise TokenmillError(f"--launch: --speculative-algorithm {algorithm} needs --speculative-num-steps")
        return f"mtp:{steps}"
    raise TokenmillError(
        f"--launch: --speculative-algorithm {algorithm!r} is not one tokenmill plans (DSPARK, EAGLE, EAGLE3, NEXTN)"
    )


def _sglang(positional: list[str], opts: dict[str, str | None]) -> LaunchReading:
    tp = _int(opts, "--tp-size", "--tensor-parallel-size", "--tp") or 1
    pp = _int(opts, "--pp-size", "--pipeline-parallel-size", "--pp") or 1
    dp = _int(opts, "--dp-size", "--data-parallel-size", "--dp") or 1
    attention_dp = "--enable-dp-attention" in opts
    flags: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "ep": _int(opts, "--ep-size", "--expert-parallel-size", "--ep") or 1,
        "dp_attention": dp if attention_dp else 1,
        "dcp": _int(opts, "--dcp-size") or 1,
        "kv_cache_dtype": _kv_dtype(_text(opts, "--kv-cache-dtype")) or "auto",
        "replayssm": "--enable-linear-replayssm-spec" in opts,
    }
    notes: list[str] = []
    optional = {
        "mem_fraction_static": _float(opts, "--mem-fraction-static"),
        "page_size": _int(opts, "--page-size"),
        "pool_ratio": _float(opts, "--mamba-full-memory-ratio"),
        "state_dtype": _text(opts, "--mamba-ssm-dtype"),
        "max_running_requests": _int(opts, "--max-running-requests"),
        "moe_a2a_backend": _text(opts, "--moe-a2a-backend"),
        "weight_format": _quantization(_text(opts, "--quantization")),
        "speculative": _speculation(
            _text(opts, "--speculative-algorithm"),
            _int(opts, "--speculative-num-steps"),
            _int(opts, "--speculative-dspark-block-size"),
        ),
    }
    flags |= {k: v for k, v in optional.items() if v is not None}
    swa = _float(opts, "--swa-full-tokens-ratio")
    if "--disable-hybrid-swa-memory" in opts:
        if swa is not None:
            raise TokenmillError("--launch gives both --disable-hybrid-swa-memory and --swa-full-tokens-ratio")
        swa = 1.0  # one pool: a sliding layer caches every token, as a full one does
    if swa is not None:
        flags["swa_full_tokens_ratio"] = swa
    if "--disable-radix-cache" in opts:
        if "--mamba-radix-cache-strategy" in opts:
            raise TokenmillError("--launch gives both --disable-radix-cache and --mamba-radix-cache-strategy")
        flags["prefix_cache"] = "off"
    elif (strategy := _text(opts, "--mamba-radix-cache-strategy")) is not None:
        flags["prefix_cache"] = strategy
    if optional["mem_fraction_static"] is None:
        notes.append("the command gives no --mem-fraction-static (SGLang picks one by GPU): tokenmill's 0.85 is used")
    if dp > 1 and not attention_dp:
        notes.append(f"--dp-size {dp} without --enable-dp-attention: {dp} replicas of the TP{tp} worker")
    model = _text(opts, "--model-path") or _text(opts, "--model")
    return _reading("sglang", model, flags, tp * pp * (1 if attention_dp else dp), opts, positional, notes)


_READ_VLLM = frozenset(
    {
        "--model",
        "--tensor-parallel-size",
        "-tp",
        "--data-parallel-size",
        "-dp",
        "--enable-expert-parallel",
        "--pipeline-parallel-size",
        "-pp",
        "--decode-context-parallel-size",
        "-dcp",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--max-num-seqs",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--mamba-ssm-cache-dtype",
        "--speculative-config",
        "--quantization",
        "--nnodes",
    }
)


def _vllm_speculation(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        cfg = json.loads(raw)
    except ValueError:
        raise TokenmillError(f"--launch: --speculative-config must be JSON (got {raw!r})") from None
    if not isinstance(cfg, dict):
        raise TokenmillError(f"--launch: --speculative-config must be a JSON object (got {raw!r})")
    n = cfg.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TokenmillError("--launch: --speculative-config needs num_speculative_tokens ≥ 1")
    method = str(cfg.get("method") or "").lower()
    model = str(cfg.get("model") or "").lower()
    if method in ("mtp", "deepseek_mtp", "eagle", "eagle3"):
        return f"mtp:{n}"
    if "dspark" in model or method == "dspark":
        return f"dspark:{n}"
    raise TokenmillError(f"--launch: --speculative-config {raw!r} is not a drafter tokenmill plans (mtp, DSpark)")


def _vllm(positional: list[str], opts: dict[str, str | None]) -> LaunchReading:
    attn_tp = _int(opts, "--tensor-parallel-size", "-tp") or 1
    dp = _int(opts, "--data-parallel-size", "-dp") or 1
    pp = _int(opts, "--pipeline-parallel-size", "-pp") or 1
    prefix_off = "--no-enable-prefix-caching" in opts
    if prefix_off and "--enable-prefix-caching" in opts:
        raise TokenmillError("--launch gives both --enable-prefix-caching and --no-enable-prefix-caching")
    flags: dict[str, Any] = {
        "tp": attn_tp * dp,
        "pp": pp,
        "dp_attention": dp,
        "ep": attn_tp * dp if "--enable-expert-parallel" in opts else 1,
        "dcp": _int(opts, "--decode-context-parallel-size", "-dcp") or 1,
        "kv_cache_dtype": _kv_dtype(_text(opts, "--kv-cache-dtype")) or "auto",
        "mem_fraction_static": _float(opts, "--gpu-memory-utilization") or 0.9,
    }
    optional = {
        "max_running_requests": _int(opts, "--max-num-seqs"),
        "state_dtype": _text(opts, "--mamba-ssm-cache-dtype"),
        "weight_format": _quantization(_text(opts, "--quantization")),
        "speculative": _vllm_speculation(_text(opts, "--speculative-config")),
        "prefix_cache": "off" if prefix_off else None,
    }
    flags |= {k: v for k, v in optional.items() if v is not None}
    model = _text(opts, "--model") or (positional.pop(0) if positional else None)
    return _reading("vllm", model, flags, attn_tp * dp * pp, opts, positional, [])


_READ_TRTLLM = frozenset(
    {
        "--model",
        "--tp-size",
        "--pp-size",
        "--ep-size",
        "--moe-expert-parallel-size",
        "--max-batch-size",
        "--kv-cache-free-gpu-memory-fraction",
        "--backend",
        "--extra-llm-api-options",
    }
)


def _trtllm(positional: list[str], opts: dict[str, str | None]) -> LaunchReading:
    """``trtllm-serve MODEL --tp_size N --ep_size N …`` (TensorRT-LLM spells its flags with
    underscores; read as dashes). Attention DP and MTP live in the ``--extra_llm_api_options``
    YAML, which is not read: a note says so."""
    tp = _int(opts, "--tp-size") or 1
    pp = _int(opts, "--pp-size") or 1
    flags: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "ep": _int(opts, "--ep-size", "--moe-expert-parallel-size") or 1,
        "dp_attention": 1,
    }
    cap = _int(opts, "--max-batch-size")
    if cap is not None:
        flags["max_running_requests"] = cap
    notes = []
    backend = _text(opts, "--backend")
    if backend is not None and backend.lower() != "pytorch":
        notes.append(f"--backend {backend}: tokenmill's TRT-LLM constants are fitted on the PyTorch backend's runs")
    free = _float(opts, "--kv-cache-free-gpu-memory-fraction")
    notes.append(
        "TRT-LLM sizes its KV cache as a share of the memory left after the weights "
        f"(--kv_cache_free_gpu_memory_fraction {0.9 if free is None else free:g}); tokenmill's 0.85 of the whole "
        "GPU is used (give --mem-fraction-static to change it)"
    )
    if "--extra-llm-api-options" in opts:
        notes.append("--extra_llm_api_options is not read: attention DP, MTP and cache settings there are not planned")
    model = _text(opts, "--model") or (positional.pop(0) if positional else None)
    return _reading("trtllm", model, flags, tp * pp, opts, positional, notes)


def _reading(
    engine: str,
    model: str | None,
    flags: dict[str, Any],
    gpus: int,
    opts: dict[str, str | None],
    positional: list[str],
    notes: list[str],
) -> LaunchReading:
    if positional:
        raise TokenmillError(f"--launch: {positional[0]!r} is not a flag {engine} takes here")
    read = {"sglang": _READ_SGLANG, "vllm": _READ_VLLM, "trtllm": _READ_TRTLLM}[engine]
    not_read = tuple(f for f in opts if f in _NO_EFFECT and f not in read)
    not_modelled = tuple(f for f in opts if f not in _NO_EFFECT and f not in read)
    return LaunchReading(
        engine=engine,
        model=model,
        flags=flags,
        gpus=gpus,
        nnodes=_int(opts, "--nnodes"),
        not_read=not_read,
        not_modelled=not_modelled,
        notes=tuple(notes),
    )


def read_launch(text: str) -> LaunchReading:
    """Read one SGLang, vLLM or TensorRT-LLM launch command (``\\``-continued lines and quotes as a shell reads
    them); a one-line ``TokenmillError`` naming the flag where it cannot be read."""
    if not isinstance(text, str) or not text.strip():
        raise TokenmillError("--launch needs a command, e.g. 'sglang serve --model-path M --tp-size 8'")
    engine, rest = _engine(_tokens(text))
    positional, opts = _options(rest)
    return {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}[engine](positional, opts)
