"""Per-step index tensors, computed once from the slices and shared by every layer.

A step's tokens are concatenated in slice order into one token axis of length T (the axis the
projections, MLPs and MoE run on). Attention and KDA need the same tokens grouped per sequence:
slices with one token form the *decode* group, longer ones the *prefill* group, and each group is
a padded ``[B, n_max]`` table of row indices into the token axis. Padding points at row T, a zero
row that ``gather_rows`` appends, so padded entries never need special cases in the math.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    context: torch.Tensor  # [B] int64: start + n, the valid prefix of each kv_slots row
    state_slots: torch.Tensor  # [B] live state slot
    ckpt_rel: list[int | None]  # checkpoint position relative to start (0 < c <= n), if any
    ckpt_slots: torch.Tensor  # [B] checkpoint slot (pad: the live slot, never written)
    dense: bool = False  # rows == arange(T).view(B, n): the group is the whole token axis, unpadded

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [T, ...] → [B, n_max, ...] per sequence (a view when the group is dense)."""
        if self.dense:
            return x.view(self.rows.shape[0], self.rows.shape[1], *x.shape[1:])
        return gather_rows(x, self.rows)

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
    dense: bool = False  # rows == arange(T).view(B, N·C): no padding, the token axis as it is


class Workspace:
    """Reusable scratch buffers of one model, for the large per-step temporaries.

    Fresh multi-MiB tensors cost page faults every step (the allocator hands big blocks back to
    the OS), which on small CPU machines is a visible share of a decode step; a buffer kept here
    is allocated once and then only grows (so it holds the largest such temporary seen, e.g. the
    gathered MLA context of the longest step). A buffer's contents are garbage, and valid only until
    the next ``take`` of the same name, so it must not outlive the layer that took it. Buffers
    are kept apart for inference mode (an inference tensor cannot be written outside it).
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device, bool], torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        numel = 1
        for d in shape:
            numel *= d
        key = (name, dtype, device, torch.is_inference_mode_enabled())
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            grown = 0 if buf is None else buf.numel() * 5 // 4  # contexts grow a little every step
            buf = torch.empty(max(numel, grown), dtype=dtype, device=device)
            self._buffers[key] = buf
        return buf[:numel].view(shape)


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
    workspace: Workspace = field(default_factory=Workspace)  # the model's scratch buffers
    memo: dict[object, tuple[torch.Tensor, ...]] = field(default_factory=dict)  # per-step values the layers share


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x[rows]`` where ``rows`` may hold ``len(x)``, which reads as a zero row (padding).

    ``index_select`` copies whole rows (advanced indexing goes element by element on CPU, several
    times slower at these sizes), and the padding is zeroed afterwards instead of appending a zero
    row to ``x``, which would copy all of it.
    """
    T = x.shape[0]
    out = x.index_select(0, rows.reshape(-1).clamp(max=T - 1)).view(*rows.shape, *x.shape[1:])
    pad = (rows >= T).view(*rows.shape, *([1] * (x.dim() - 1)))
    return out.masked_fill_(pad, 0)


def scatter_rows(out: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> None:
    """``out[rows] = src`` for ``rows`` [B, n] into ``out`` [T + 1, ...] (row T takes the padding)."""
    out.index_copy_(0, rows.reshape(-1), src.reshape(-1, *out.shape[1:]))


def _group(
    slices: list[SeqSlice],
    ids: list[int],
    offsets: list[int],
    T: int,
    page_size: int,
    device: torch.device,
    num_pages: int,
) -> Group:
    """Index tensors of the sequences ``ids``, computed with a handful of batched ops.

    ``num_pages`` is the KV pool's (0: the model has no KV cache). Every page id is checked
    against it here, once per step, so that the layers' gathers (and the C decode kernel, which
    reads the pool through ``kv_slots`` unchecked) never see a cell outside the pool.
    """
    lengths = [int(slices[i].token_ids.numel()) for i in ids]
    n = torch.tensor(lengths, dtype=torch.int64, device=device)
    start = torch.tensor([slices[i].start for i in ids], dtype=torch.int64, device=device)
    off = torch.tensor([offsets[i] for i in ids], dtype=torch.int64, device=device)
    step = torch.arange(max(lengths, default=1), device=device)[None, :]
    valid = step < n[:, None]
    context = start + n
    pos = torch.arange(int(context.max()) if ids else 1, device=device)[None, :]
    if num_pages and ids:  # flat cell of every context position: page_table[p // page_size] * page_size + p % page_size
        tables = pad_sequence([slices[i].page_table.to(device) for i in ids], batch_first=True)
        if int(tables.min()) < 0 or int(tables.max()) >= num_pages:
            raise TokenmillError(f"page ids must be in [0, {num_pages}) (the KV pool's pages)")
        pages = tables.gather(1, (pos // page_size).clamp(max=tables.shape[1] - 1).expand(len(ids), -1))
        cells = pages * page_size + pos % page_size
    else:
        cells = torch.zeros(len(ids), pos.shape[1], dtype=torch.int64, device=device)
    ckpt_rel: list[int | None] = []
    ckpt_slot: list[int] = []
    dense = bool(ids) and len(ids) == len(slices) and min(lengths) == max(lengths)
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
        context=context,
        state_slots=torch.tensor([slices[i].state_slot for i in ids], dtype=torch.int64, device=device),
        ckpt_rel=ckpt_rel,
        ckpt_slots=torch.tensor(ckpt_slot, dtype=torch.int64, device=device),
        dense=dense,
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
        dense=g.dense and rows_t.numel() == T,
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


def build_context(
    slices: list[SeqSlice],
    pools: CachePools,
    device: torch.device,
    has_state: bool,
    workspace: Workspace | None = None,
) -> StepContext:
    if not slices:
        raise TokenmillError("forward_slices needs at least one slice")
    offsets, T = [], 0
    for k, s in enumerate(slices):
        _check(s, k, pools, has_state)
        offsets.append(T)
        T += int(s.token_ids.numel())
    token_ids = torch.cat([s.token_ids.to(device) for s in slices])
    num_pages = pools.kv.shape[1] if pools.kv is not None else 0
    dec = [k for k, s in enumerate(slices) if s.token_ids.numel() == 1]
    pre = [k for k, s in enumerate(slices) if s.token_ids.numel() > 1]
    decode = _group(slices, dec, offsets, T, pools.page_size, device, num_pages)
    prefill = _group(slices, pre, offsets, T, pools.page_size, device, num_pages)
    only = decode if not pre else prefill if not dec else None
    if only is not None and only.dense:  # one unpadded group: its tables already are the token axis
        positions = only.positions.reshape(-1)
        slot_mapping = only.kv_slots.gather(1, only.positions).reshape(-1)
    else:  # scatter each group's positions and new cells onto the token axis
        positions = torch.zeros(T + 1, dtype=torch.int64, device=device)
        slot_mapping = torch.zeros(T + 1, dtype=torch.int64, device=device)
        for g in (decode, prefill):
            positions[g.rows] = g.positions
            slot_mapping[g.rows] = g.kv_slots.gather(1, g.positions)
        positions, slot_mapping = positions[:T], slot_mapping[:T]
    logit_rows = [offsets[k] + int(s.token_ids.numel()) - 1 for k, s in enumerate(slices) if s.want_logits]
    return StepContext(
        num_tokens=T,
        token_ids=token_ids,
        positions=positions,
        slot_mapping=slot_mapping,
        decode=decode,
        prefill=prefill,
        chunks=_chunk_layout(prefill, T, KDA_CHUNK) if has_state and pre else None,
        logit_rows=torch.tensor(logit_rows, dtype=torch.int64, device=device),
        workspace=workspace or Workspace(),
    )
