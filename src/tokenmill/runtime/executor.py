"""``TorchExecutor``: runs the serving core's scheduled batches on a real model.

Each batch becomes a list of ``SeqSlice``s (one per prefill chunk or decode step) over the
preallocated KV page pool and state-slot pool; the model runs them in one forward pass (decodes
batched, chunked prefill mixed in), then each finishing slice is sampled with its request's
parameters. The step's time is the wall clock.
"""

from __future__ import annotations

import time

import torch

from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.core.request import Request
from tokenmill.runtime.models.base import CachePools, CausalLM, SeqSlice
from tokenmill.runtime.sampling import SamplingParams, sample


class TorchExecutor:
    def __init__(
        self,
        model: CausalLM,
        pools: CachePools,
        eos_token_ids: tuple[int, ...] = (),
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.pools = pools
        self.eos = set(eos_token_ids)
        self.device = device
        self._params: dict[str, SamplingParams] = {}
        self._generators: dict[str, torch.Generator] = {}
        self._shared = torch.Generator(device="cpu").manual_seed(seed)
        self.steps = 0
        self.busy_s = 0.0

    def register(self, rid: str, params: SamplingParams) -> None:
        """Remember a request's sampling parameters (and give it its own generator if seeded)."""
        self._params[rid] = params
        if params.seed is not None:
            self._generators[rid] = torch.Generator(device="cpu").manual_seed(params.seed)

    def forget(self, rid: str) -> None:
        self._params.pop(rid, None)
        self._generators.pop(rid, None)

    def _pages(self, req: Request, tokens: int) -> torch.Tensor:
        n = -(-tokens // self.pools.page_size)
        return torch.tensor(req.pages[:n], dtype=torch.int64, device=self.device)

    def execute(self, batch: ScheduledBatch) -> StepResult:
        t0 = time.perf_counter()
        slices: list[SeqSlice] = []
        owners: list[Request] = []
        for p in batch.prefill:
            req = p.request
            seq = [*(req.prompt_ids or []), *req.output_ids]
            end = p.start + p.length
            slices.append(
                SeqSlice(
                    token_ids=torch.tensor(seq[p.start : end], dtype=torch.int64, device=self.device),
                    start=p.start,
                    page_table=self._pages(req, end),
                    state_slot=req.live_slot if req.live_slot is not None else 0,
                    restore_slot=p.restore_slot,
                    checkpoint_at=p.checkpoint_at,
                    checkpoint_slot=p.checkpoint_slot,
                    want_logits=p.last,
                )
            )
            if p.last:
                owners.append(req)
        for d in batch.decode:
            req = d.request
            last = req.output_ids[-1] if req.output_ids else (req.prompt_ids or [0])[-1]
            slices.append(
                SeqSlice(
                    token_ids=torch.tensor([last], dtype=torch.int64, device=self.device),
                    start=d.context - 1,
                    page_table=self._pages(req, d.context),
                    state_slot=req.live_slot if req.live_slot is not None else 0,
                    checkpoint_at=d.context if d.checkpoint_slot is not None else None,
                    checkpoint_slot=d.checkpoint_slot,
                    want_logits=True,
                )
            )
            owners.append(req)
        tokens: dict[str, list[int]] = {}
        stopped: set[str] = set()
        if slices:
            with torch.inference_mode():
                logits = self.model.forward_slices(slices, self.pools)
            params = [self._params.get(r.rid, SamplingParams(temperature=0.0)) for r in owners]
            gens = [self._generators.get(r.rid, self._shared) for r in owners]
            for req, sp, token in zip(owners, params, sample(logits.float(), params, gens), strict=True):
                tokens[req.rid] = [token]
                if not sp.ignore_eos and (token in self.eos or token in sp.stop_token_ids):
                    stopped.add(req.rid)
        elapsed = time.perf_counter() - t0
        self.steps += 1
        self.busy_s += elapsed
        return StepResult(elapsed, tokens, stopped)
