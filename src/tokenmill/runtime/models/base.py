"""The contract between the executor and the model code: slices in, last-token logits out.

The executor owns the memory (a paged latent-KV pool and a pool of linear-attention state slots)
and the bookkeeping (which pages and slots a request holds); the model only reads and writes them
at the places a ``SeqSlice`` names. That keeps the model free of scheduling policy and lets one
forward pass serve any mix of prefill chunks and decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tokenmill.runtime.models.config import ModelConfig


@dataclass
class SeqSlice:
    """The tokens one sequence contributes to a step, and where its cache and state live."""

    token_ids: torch.Tensor  # [n] int64: new tokens of this sequence in this step
    start: int  # absolute position of token_ids[0] (= tokens already in the cache)
    page_table: torch.Tensor  # [n_pages] int64: KV page ids covering positions [0, start + n)
    state_slot: int  # live linear-attention state slot (read at start, written at end)
    restore_slot: int | None = None  # before anything: copy this slot's state into state_slot
    checkpoint_at: int | None = None  # also save the state as of this absolute position ...
    checkpoint_slot: int | None = None  # ... into this slot (start < checkpoint_at <= start + n)
    want_logits: bool = True  # return logits for the last token of the slice


@dataclass
class CachePools:
    """Preallocated by the executor from the sizes the model reports (see ``allocate_pools``)."""

    kv: torch.Tensor | None  # [n_kv_layers, num_pages, page_size, kv_width]
    ssm: torch.Tensor | None  # [n_linear_layers, num_slots, H, dk, dv] fp32 recurrent state
    conv: torch.Tensor | None  # [n_linear_layers, num_slots, K-1, conv_channels] model dtype
    page_size: int


class CausalLM(nn.Module):
    """What the executor sees of a model. Subclasses fill in the sizes and ``forward_slices``."""

    config: ModelConfig
    vocab_size: int
    kv_layers: list[int]  # layer indices with a KV cache (MLA)
    linear_layers: list[int]  # layer indices with a recurrent state (KDA)
    kv_width: int  # values cached per token per KV layer (kv_lora_rank + qk_rope_head_dim)
    ssm_shape: tuple[int, int, int]  # (H, dk, dv) per linear layer
    conv_shape: tuple[int, int]  # (K-1, channels) per linear layer: a window is K-1 token rows

    def forward_slices(self, slices: list[SeqSlice], pools: CachePools, *, all_logits: bool = False) -> torch.Tensor:
        """Run one step; return fp32 logits ``[num slices with want_logits, vocab]`` in slice order.

        ``all_logits=True`` returns logits for every token of every slice instead (concatenated in
        slice order), which the parity tests use to compare whole prompts.
        """
        raise NotImplementedError


def allocate_pools(
    model: CausalLM,
    num_pages: int,
    page_size: int,
    num_slots: int,
    dtype: torch.dtype,
    device: str | torch.device,
) -> CachePools:
    """Zeroed pools sized for ``model``. The recurrent state is always fp32: it integrates over the
    whole sequence and bf16 rounding compounds; the KV latents and conv windows use ``dtype``."""
    kv = None
    if model.kv_layers:
        kv = torch.zeros(len(model.kv_layers), num_pages, page_size, model.kv_width, dtype=dtype, device=device)
    ssm = conv = None
    if model.linear_layers:
        n = len(model.linear_layers)
        ssm = torch.zeros(n, num_slots, *model.ssm_shape, dtype=torch.float32, device=device)
        conv = torch.zeros(n, num_slots, *model.conv_shape, dtype=dtype, device=device)
    return CachePools(kv=kv, ssm=ssm, conv=conv, page_size=page_size)
