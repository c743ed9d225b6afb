"""``LLM``: the real engine offline (like vLLM's ``LLM.generate``), and the step API the HTTP
server drives. The same ``core.Engine`` and ``Scheduler`` as the simulator, with a
``TorchExecutor``."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tokenmill.core import Engine, Request, Scheduler, SchedulerConfig, Status
from tokenmill.core.batch import ScheduledBatch
from tokenmill.errors import TokenmillError
from tokenmill.runtime.executor import TorchExecutor
from tokenmill.runtime.models import allocate_pools, load_model
from tokenmill.runtime.models.native import keep_freed_memory
from tokenmill.runtime.pools import PoolSizes, size_pools
from tokenmill.runtime.sampling import SamplingParams
from tokenmill.runtime.tokenizer import Tokenizer

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


@dataclass
class Generation:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    cached_tokens: int = 0
    token_times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class EngineOptions:
    dtype: str = "float32"
    memory_gib: float = 1.0
    pool_ratio: float | None = None
    num_pages: int | None = None
    num_state_slots: int | None = None
    page_size: int = 16
    chunk_tokens: int = 2048
    max_running_requests: int = 64
    prefix_cache: bool = True
    mixed_chunk: bool = True
    seed: int = 0
    device: str = "cpu"
    threads: int | None = None  # torch threads; default 1 on a machine of 2 cores or fewer


def resolve_model_dir(model: str | Path | None) -> Path:
    """``None`` or ``"default"``: the embedded default checkpoint (built on first use); else a directory."""
    if model is None or str(model) in ("default", "kimi-linear-tiny"):
        from tokenmill.runtime.default_model import ensure_default_model

        return ensure_default_model()
    path = Path(model)
    if path.is_dir() and (path / "config.json").exists():
        return path
    from tokenmill.spec import PRESETS

    if str(model).lower() in PRESETS:
        raise TokenmillError(
            f"--model {model}: a planning preset has no weights; give a checkpoint directory "
            "(or omit --model for the embedded default)"
        )
    raise TokenmillError(f"--model {model!r}: not a checkpoint directory with config.json")


def check_token_ids(ids: list[int], vocab: int, what: str = "prompt token ids") -> None:
    """Every id names a token of the model's vocabulary (``what`` names them in the error)."""
    if any(t < 0 or t >= vocab for t in ids):
        raise TokenmillError(f"{what} must be in [0, {vocab})")


class LLM:
    def __init__(self, model: str | Path | None = None, options: EngineOptions | None = None) -> None:
        opts = options or EngineOptions()
        if opts.dtype not in _DTYPES:
            raise TokenmillError(f"--dtype must be one of {'|'.join(_DTYPES)} (got {opts.dtype!r})")
        self.options = opts
        self.model_dir = resolve_model_dir(model)
        dtype = _DTYPES[opts.dtype]
        # On a small machine the model's many small ops run faster on one thread, and two OpenMP
        # threads collapse when another process shares the cores (docs/engine.md).
        threads = opts.threads if opts.threads is not None else (1 if (os.cpu_count() or 1) <= 2 else None)
        if threads is not None:
            torch.set_num_threads(threads)
        if opts.device == "cpu":
            keep_freed_memory()  # big per-step temporaries: reuse heap blocks, not fresh pages
        torch.manual_seed(opts.seed)
        self.model = load_model(self.model_dir, dtype=dtype, device=opts.device)
        self.tokenizer = Tokenizer(self.model_dir if (self.model_dir / "tokenizer.json").exists() else None)
        self.sizes: PoolSizes = size_pools(
            self.model_dir,
            dtype_bytes=torch.finfo(dtype).bits // 8,
            page_size=opts.page_size,
            prefix_cache=opts.prefix_cache,
            memory_bytes=int(opts.memory_gib * 1024**3),
            pool_ratio=opts.pool_ratio,
            num_pages=opts.num_pages,
            num_state_slots=opts.num_state_slots,
            max_running_requests=opts.max_running_requests,
        )
        hybrid = bool(self.model.linear_layers)
        self.config = SchedulerConfig(
            num_pages=self.sizes.num_pages,
            page_tokens=opts.page_size,
            num_state_slots=self.sizes.num_state_slots if hybrid else 0,
            max_running_requests=self.sizes.max_running_requests,
            chunk_tokens=opts.chunk_tokens,
            track_slots_per_request=2 if (hybrid and opts.prefix_cache) else 0,
            prefix_cache=opts.prefix_cache,
            mixed_chunk=opts.mixed_chunk,
        )
        need = 1 + self.config.track_slots_per_request
        if hybrid and self.config.num_state_slots < need:  # the scheduler would wait forever to admit one
            buffers = " (its live state and the prefix cache's 2 checkpoints)" if need > 1 else ""
            raise TokenmillError(
                f"{self.config.num_state_slots} state slots admit no request: one needs {need}{buffers}; "
                f"give --num-state-slots {need} or more, more --memory-gib, or --no-prefix-cache"
            )
        self.pools = allocate_pools(
            self.model, self.sizes.num_pages, opts.page_size, max(1, self.sizes.num_state_slots), dtype, opts.device
        )
        eos = tuple(i for i in (self.tokenizer.eos_token_id,) if i is not None)
        self.executor = TorchExecutor(self.model, self.pools, eos, seed=opts.seed, device=opts.device)
        self.engine = Engine(Scheduler(self.config), self.executor)
        self._ids = itertools.count()
        self.now = 0.0
        self.last_batch: ScheduledBatch | None = None  # the batch of the latest step

    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    # --- the step API (the server drives these) ------------------------------------------------
    def add_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Request:
        if not prompt_ids:
            raise TokenmillError("the prompt must contain at least one token")
        check_token_ids(prompt_ids, self.model.vocab_size)
        rid = request_id or f"req-{next(self._ids)}"
        req = Request(
            rid=rid,
            prompt_len=len(prompt_ids),
            max_new_tokens=params.max_tokens,
            prompt_ids=list(prompt_ids),
            arrival_s=self.now,
        )
        self.executor.register(rid, params)
        self.engine.add_request(req)
        return req

    def step(self) -> list[Request]:
        """Run one engine step; returns the requests that finished in it."""
        out = self.engine.step(self.now)
        if out is None:
            return []
        self.last_batch = out.batch
        self.now = out.end_s
        for req in out.finished:
            self.executor.forget(req.rid)
        return out.finished

    def abort(self, req: Request) -> None:
        self.scheduler.abort(req)
        self.executor.forget(req.rid)

    # --- offline ----------------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[list[int] | str], params: SamplingParams | list[SamplingParams]
    ) -> list[Generation]:
        per = params if isinstance(params, list) else [params] * len(prompts)
        reqs = []
        for prompt, p in zip(prompts, per, strict=True):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            reqs.append(self.add_request(ids, p))
        while any(r.status is not Status.FINISHED for r in reqs):
            self.step()
        return [
            Generation(
                r.rid,
                list(r.prompt_ids or []),
                list(r.output_ids),
                self.tokenizer.decode(r.output_ids),
                r.finish_reason,
                r.cached_tokens,
                list(r.token_times),
            )
            for r in reqs
        ]
