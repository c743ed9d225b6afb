"""Per-step index tensors, computed once from the slices and shared by every layer.

A step's tokens are concatenated in slice order into one token axis of length T (the axis the
projections, MLPs and MoE run on). Attention and KDA need the same tokens grouped per sequence:
slices with one token form the *decode* group, longer ones the *prefill* group, and each group is
a padded ``[B, n_max]`` table of row indices into the token axis. Padding points at row T, a zero
row that ``gather_rows`` appends, so padded entries never need special cases in the math.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch
from torch.nn.utils.rnn import pad_sequence

from tokenmill.errors import TokenmillError
from tokenmill.runtime.models.base import CachePools, SeqSlice

KDA_CHUNK = 64  # chunk length of the chunked (prefill) KDA form, as fla's ``chunk_kda``


@dataclass
class Group:
    """The sequences of one kind (decode or prefill) in this step, padded to a common length."""

    slice_ids: list[int]  # indices into the step's slice list
    rows: torch.Tensor  # [B, n_max] row of each token in the token axis (pad: T)
    valid: torch.Tensor  # [B, n_max] bool
    lengths: list[int]  # n per sequence
    positions: torch.Tensor  # [B, n_max] absolute positions (pad: 0)
    kv_slots: torch.Tensor  # [B, L_max] flat KV cell (page * page_size + offset) of positions [0, start + n)
    kv_valid: torch.Tensor  # [B, L_max] bool
    state_slots: torch.Tensor  # [B] live state slot
    ckpt_rel: list[int | None]  # checkpoint position relative to start (0 < c <= n), if any
    ckpt_slots: torch.Tensor  # [B] checkpoint slot (pad: the live slot, never written)

    @property
    def size(self) -> int:
        return len(self.slice_ids)


@dataclass
class ChunkLayout:
    """Prefill tokens laid out in KDA chunks; a checkpoint position always starts a new chunk.

    Each sequence's tokens are split into segments at its checkpoint, and each segment is padded
    to a multiple of the chunk length. A padded token has k = v = 0, β = 0 and g = 0, so it leaves
    the state unchanged: the state after the checkpoint's last chunk is exact, and the state after
    the final chunk is the state at the end of the slice.
    """

    rows: torch.Tensor  # [B, n_chunks * C] row in the token axis (pad: T)
    ckpt_chunk: torch.Tensor  # [B] index of the chunk after which to snapshot (-1: none)
    n_chunks: int


@dataclass
class StepContext:
    num_tokens: int
    token_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slot_mapping: torch.Tensor  # [T] flat KV cell each new token is written to
    decode: Group
    prefill: Group
    chunks: ChunkLayout | None  # of the prefill group, if the model has KDA layers
    logit_rows: torch.Tensor  # [num slices with want_logits] last row of each such slice


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x[rows]`` where ``rows`` may hold ``len(x)``, which reads as a zero row (padding)."""
    pad = x.new_zeros((1, *x.shape[1:]))
    return torch.cat([x, pad])[rows]


def _group(
    slices: list[SeqSlice],
    ids: list[int],
    offsets: list[int],
    T: int,
    page_size: int,
    device: torch.device,
    has_kv: bool,
) -> Group:
    """Index tensors of the sequences ``ids``, computed with a handful of batched ops."""
    lengths = [int(slices[i].token_ids.numel()) for i in ids]
    n = torch.tensor(lengths, dtype=torch.int64, device=device)
    start = torch.tensor([slices[i].start for i in ids], dtype=torch.int64, device=device)
    off = torch.tensor([offsets[i] for i in ids], dtype=torch.int64, device=device)
    step = torch.arange(max(lengths, default=1), device=device)[None, :]
    valid = step < n[:, None]
    context = start + n
    pos = torch.arange(int(context.max()) if ids else 1, device=device)[None, :]
    if has_kv and ids:  # flat cell of every context position: page_table[p // page_size] * page_size + p % page_size
        tables = pad_sequence([slices[i].page_table.to(device) for i in ids], batch_first=True)
        pages = tables.gather(1, (pos // page_size).clamp(max=tables.shape[1] - 1).expand(len(ids), -1))
        cells = pages * page_size + pos % page_size
    else:
        cells = torch.zeros(len(ids), pos.shape[1], dtype=torch.int64, device=device)
    ckpt_rel: list[int | None] = []
    ckpt_slot: list[int] = []
    for i in ids:
        s = slices[i]
        at, slot = s.checkpoint_at, s.checkpoint_slot
        ckpt_rel.append(None if at is None else at - s.start)
        ckpt_slot.append(slot if at is not None and slot is not None else s.state_slot)
    return Group(
        slice_ids=ids,
        rows=torch.where(valid, off[:, None] + step, T),
        valid=valid,
        lengths=lengths,
        positions=torch.where(valid, start[:, None] + step, 0),
        kv_slots=cells,
        kv_valid=pos < context[:, None],
        state_slots=torch.tensor([slices[i].state_slot for i in ids], dtype=torch.int64, device=device),
        ckpt_rel=ckpt_rel,
        ckpt_slots=torch.tensor(ckpt_slot, dtype=torch.int64, device=device),
    )


def _chunk_layout(g: Group, T: int, chunk: int) -> ChunkLayout:
    device = g.rows.device
    per_seq: list[torch.Tensor] = []
    ckpt_chunk: list[int] = []
    for b, n in enumerate(g.lengths):
        rows = g.rows[b, :n]
        c = g.ckpt_rel[b]
        cuts = [0, c, n] if c is not None and c < n else [0, n]
        pieces = []
        for lo, hi in pairwise(cuts):
            pad = -(hi - lo) % chunk
            pieces += [rows[lo:hi], torch.full((pad,), T, dtype=torch.int64, device=device)]
        per_seq.append(torch.cat(pieces))
        ckpt_chunk.append(-1 if c is None else -(-c // chunk) - 1)
    rows_t = pad_sequence(per_seq, batch_first=True, padding_value=T)
    return ChunkLayout(
        rows=rows_t,
        ckpt_chunk=torch.tensor(ckpt_chunk, dtype=torch.int64, device=device),
        n_chunks=rows_t.shape[1] // chunk,
    )


def _check(s: SeqSlice, k: int, pools: CachePools, has_state: bool) -> None:
    n = s.token_ids.numel()
    if s.token_ids.dim() != 1 or n == 0:
        raise TokenmillError(f"slice {k}: token_ids must be a non-empty 1-D tensor")
    if s.start < 0:
        raise TokenmillError(f"slice {k}: start must be >= 0 (got {s.start})")
    need = -(-(s.start + n) // pools.page_size)
    if pools.kv is not None and s.page_table.numel() < need:
        raise TokenmillError(
            f"slice {k}: page_table has {s.page_table.numel()} pages, positions [0, {s.start + n}) need {need}"
        )
    if s.checkpoint_at is not None:
        if not s.start < s.checkpoint_at <= s.start + n:
            raise TokenmillError(
                f"slice {k}: checkpoint_at must be in ({s.start}, {s.start + n}] (got {s.checkpoint_at})"
            )
        if s.checkpoint_slot is None:
            raise TokenmillError(f"slice {k}: checkpoint_at without checkpoint_slot")
    if has_state:
        slots = pools.ssm.shape[1] if pools.ssm is not None else 0
        for name, slot in (
            ("state_slot", s.state_slot),
            ("restore_slot", s.restore_slot),
            ("checkpoint_slot", s.checkpoint_slot),
        ):
            if slot is not None and not 0 <= slot < slots:
                raise TokenmillError(f"slice {k}: {name} {slot} outside the {slots} state slots")


def build_context(slices: list[SeqSlice], pools: CachePools, device: torch.device, has_state: bool) -> StepContext:
    if not slices:
        raise TokenmillError("forward_slices needs at least one slice")
    offsets, T = [], 0
    for k, s in enumerate(slices):
        _check(s, k, pools, has_state)
        offsets.append(T)
        T += int(s.token_ids.numel())
    token_ids = torch.cat([s.token_ids.to(device) for s in slices])
    has_kv = pools.kv is not None
    dec = [k for k, s in enumerate(slices) if s.token_ids.numel() == 1]
    pre = [k for k, s in enumerate(slices) if s.token_ids.numel() > 1]
    decode = _group(slices, dec, offsets, T, pools.page_size, device, has_kv)
    prefill = _group(slices, pre, offsets, T, pools.page_size, device, has_kv)
    positions = torch.zeros(T + 1, dtype=torch.int64, device=device)
    slot_mapping = torch.zeros(T + 1, dtype=torch.int64, device=device)
    for g in (decode, prefill):  # scatter each group's positions and new cells onto the token axis
        positions[g.rows] = g.positions
        slot_mapping[g.rows] = g.kv_slots.gather(1, g.positions)
    logit_rows = [offsets[k] + int(s.token_ids.numel()) - 1 for k, s in enumerate(slices) if s.want_logits]
    return StepContext(
        num_tokens=T,
        token_ids=token_ids,
        positions=positions[:T],
        slot_mapping=slot_mapping[:T],
        decode=decode,
        prefill=prefill,
        chunks=_chunk_layout(prefill, T, KDA_CHUNK) if has_state and pre else None,
        logit_rows=torch.tensor(logit_rows, dtype=torch.int64, device=device),
    )
