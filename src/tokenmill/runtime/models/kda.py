"""Kimi Delta Attention: short convolutions, channel-wise forget gate, delta-rule recurrence.

Per head the state is S ∈ R^{dk×dv} (fp32, one slot per sequence in ``CachePools.ssm``); the short
convolutions keep their last K-1 inputs (``CachePools.conv``, [K-1, channels] per slot). Two forms
of the same recurrence, chosen per group of the step:

* decode (one token): the recurrent step, batched over all decode sequences;
  S ← Diag(e^g) S;  u = β (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq (computed from the old state in one
  bmm, see ``_recurrent``).
* prefill (n > 1): the chunked form of ``naive_chunk_kda`` (chunk 64) over all chunks of all
  prefill sequences at once (``chunk_kda``): the intra-chunk decay products as factorised matmuls
  (``intra_chunk``), the WY/UT transform as one batched triangular solve, then a loop over chunk
  index that carries only S. A checkpoint position is made a chunk boundary (see
  ``batch.ChunkLayout``), so the state there is exact.

The forget gate is Kimi Linear's g = −e^{A}·softplus(a + dt_bias), or K3's lower-bounded "safe
gate" g = lb·sigmoid(e^{A}·(a + dt_bias)) when ``gate_lower_bound`` is set. The output gate is
Kimi Linear's low rank ``g_b_proj(g_a_proj(x))`` or K3's full rank ``g_proj(x)``
(``use_full_rank_gate``); either feeds ``o_norm`` = RMSNorm(o) ⊙ sigmoid(gate) per head.

The short convolutions always use SiLU: transformers applies ``config.hidden_act`` there, which is
SiLU for Kimi Linear, while K3's ``hidden_act`` (SiTU) is a gated MLP activation and the reference
gives SiLU(conv4(·)) for K3's KDA. On disk: ``self_attn.{q,k,v}_conv1d.weight`` [H·d, 1, K]
(Moonshot's and transformers' saved names), stacked here into one tap-major depthwise kernel
[K, 3·H·d]. The projections of x (q, k, v, f_a, the output gate's first matrix, b) are one fused
matrix ``in_proj``, filled through views from the per-projection disk tensors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.runtime.models.batch import ChunkLayout, Group, StepContext, Workspace, gather_rows, scatter_rows
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.ops import gated_rms_norm, l2norm, linear, softplus20
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec

FACTOR_BLOCKS = (64, 32, 16)  # row-block sizes of the factorised intra-chunk products, widest first
FACTOR_LIMIT = 60.0  # largest |Γ_a − Γ_ref| a factor may carry (e^±60: well inside fp32's normal range)
EXPLICIT_BATCH = 16  # chunks per batch of the explicit fallback (each needs C·C·dk floats)


def intra_chunk(xs: list[torch.Tensor], k: torch.Tensor, G: torch.Tensor) -> list[torch.Tensor]:
    """A_i[m, a, b] = Σ_c xs[i][m, a, c] · k[m, b, c] · e^{G[m, a, c] − G[m, b, c]} for b ≤ a, 0 above.

    xs: left operands [M, C, dk]; k and G [M, C, dk] (G: the cumulative log-decay inside each of
    the M chunks, non-increasing along C since every g ≤ 0) → one [M, C, C] per left operand.

    The explicit form builds a C×C×dk decay tensor per chunk. Instead, rows are taken in blocks of
    s and the decay is split at a reference position r in the middle of each block:
    e^{G_a − G_b} = e^{G_a − G_r} · e^{G_r − G_b}, so a block is one matmul
    (x ⊙ e^{G − G_r}) @ (k ⊙ e^{G_r − G})ᵀ. A factor a valid entry (b ≤ a) uses is either ≤ 1
    (b before the block: G_r − G_b ≤ 0) or within e^{±span} of 1 (a, b in the block), where span is
    the largest |G − G_r| inside a block; as long as span ≤ ``FACTOR_LIMIT`` nothing overflows and
    an underflowing factor only loses terms below e^{span − 87}. Each product is the same rounded
    term as the explicit form's, so the two agree to fp32 rounding. The widest block whose span
    is within the limit in every chunk is used; chunks over the limit even at the narrowest block
    fall back to the explicit form.
    """
    M, C, dk = G.shape
    for s in [b for b in FACTOR_BLOCKS if b <= C and C % b == 0] or [C]:
        n = C // s
        Gs = G.view(M, n, s, dk)
        ref = Gs[:, :, s // 2]  # [M, n, dk]
        rel = Gs - ref[:, :, None]  # [M, n, s, dk]: G_a − G_r inside each block
        span = torch.maximum(rel.amax(dim=(1, 2, 3)), rel.amin(dim=(1, 2, 3)).neg())  # [M]
        if bool((span <= FACTOR_LIMIT).all()):
            break
    decay = rel.exp_()
    # Right factors for every column; columns after the block are above the diagonal (masked),
    # the clamp only keeps their exponent finite.
    right = (ref[:, :, None] - G[:, None]).clamp_(max=FACTOR_LIMIT).exp_().mul_(k[:, None])  # [M, n, C, dk]
    right_t = right.transpose(-1, -2)
    out = [torch.matmul(x.view(M, n, s, dk) * decay, right_t).view(M, C, C) for x in xs]
    bad = (span > FACTOR_LIMIT).nonzero().flatten().tolist()
    for lo in range(0, len(bad), EXPLICIT_BATCH):
        idx = bad[lo : lo + EXPLICIT_BATCH]
        for A, x in zip(out, xs, strict=True):
            A[idx] = _intra_explicit(x[idx], k[idx], G[idx])
    upper = torch.ones(C, C, dtype=torch.bool, device=G.device).triu(1)
    return [A.masked_fill_(upper, 0.0) for A in out]


def _intra_explicit(x: torch.Tensor, k: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``intra_chunk`` the direct way (a C×C×dk decay tensor per chunk), for any decay."""
    C = G.shape[-2]
    upper = torch.ones(C, C, dtype=torch.bool, device=x.device).triu(1)
    decay = (G[:, :, None, :] - G[:, None, :, :]).masked_fill(upper[..., None], float("-inf")).exp()
    return (x[:, :, None, :] * (k[:, None, :, :] * decay)).sum(-1)


def chunk_kda(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, S: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked KDA (``naive_chunk_kda``'s math) over B sequences of N chunks at once.

    q, k, g [B, H, N, C, dk], v [B, H, N, C, dv] (g: per-token log-decay), beta [B, H, N, C],
    S [B, H, dk, dv] the state before the first chunk → (outputs [B, H, N, C, dv], states
    [B, H, N + 1, dk, dv]: before each chunk, then after the last). Everything inside a chunk (the
    decay products, the WY/UT transform) is batched over all chunks of all sequences; only the
    state crosses chunks, so the loop over N is two small batched matmuls per chunk.
    """
    B, H, N, C, dk = k.shape
    dv = v.shape[-1]
    BH, M = B * H, B * H * N
    q, k, v, g = (t.reshape(M, C, t.shape[-1]) for t in (q, k, v, g))
    beta = beta.reshape(M, C, 1)
    G = g.cumsum(dim=1)
    kb = k * beta
    a_kk, a_qk = intra_chunk([kb, q], k, G)
    eG = G.exp()
    # WY/UT transform: X = (I + strictly-lower A_kk)⁻¹ [βV | β e^Γ K] (A_kk's diagonal is ignored),
    # solved transposed (X ᵀ (I + A_kk)ᵀ = Rᵀ), which LAPACK takes without relayout copies.
    rhs = torch.empty(M, C, dv + dk, dtype=v.dtype, device=v.device)
    torch.mul(v, beta, out=rhs[..., :dv])
    torch.mul(kb, eG, out=rhs[..., dv:])
    x = torch.linalg.solve_triangular(a_kk.mT, rhs.mT, upper=True, left=False, unitriangular=True).mT
    u, w = x[..., :dv].view(BH, N, C, dv), x[..., dv:].view(BH, N, C, dk)
    g_last = G[:, -1:, :]  # [M, 1, dk]
    k_decayed = (g_last - G).exp_().mul_(k).view(BH, N, C, dk).transpose(-1, -2)  # [BH, N, dk, C]
    last_decay = g_last.exp().view(BH, N, dk, 1)
    states = torch.empty(BH, N + 1, dk, dv, dtype=S.dtype, device=S.device)
    state = states[:, 0]
    state.copy_(S.reshape(BH, dk, dv))
    v_new = torch.empty(BH, N, C, dv, dtype=v.dtype, device=v.device)
    for i in range(N):
        vn = torch.baddbmm(u[:, i], w[:, i], state, alpha=-1, out=v_new[:, i])  # u − w S
        state = torch.baddbmm(state * last_decay[:, i], k_decayed[:, i], vn, out=states[:, i + 1])
    out = torch.matmul((q * eG).view(BH, N, C, dk), states[:, :N])
    out.view(M, C, dv).baddbmm_(a_qk, v_new.view(M, C, dv))
    return out.view(B, H, N, C, dv), states.view(B, H, N + 1, dk, dv)


class KDAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        H, d, D, K = cfg.kda_heads, cfg.kda_head_dim, cfg.hidden_size, cfg.conv_kernel
        width = H * d
        gate_width = width if cfg.kda_full_rank_gate else d
        # The projections of x, fused into one matmul: q, k, v, f_a, g (full rank) or g_a, b.
        self.split = [3 * width, d, gate_width, H]
        self.in_proj = new_param((sum(self.split), D), dtype, device)
        self.conv = new_param((K, 3 * width), dtype, device)  # depthwise kernels of q, k, v: tap-major
        self.A_log = new_param((1, 1, H, 1), dtype, device)
        self.dt_bias = new_param((width,), torch.float32, device)  # fp32 as transformers keeps it
        self.f_b_proj = new_param((width, d), dtype, device)
        self.g_b_proj: nn.Parameter | None = None
        if not cfg.kda_full_rank_gate:
            self.g_b_proj = new_param((width, d), dtype, device)
        self.o_norm = new_param((d,), dtype, device)
        self.o_proj = new_param((D, width), dtype, device)

    def _in_views(self) -> dict[str, torch.Tensor]:
        """The disk tensors' rows of the fused input projection."""
        width = self.cfg.kda_heads * self.cfg.kda_head_dim
        names = ["q_proj", "k_proj", "v_proj", "f_a_proj", "g_proj" if self.g_b_proj is None else "g_a_proj", "b_proj"]
        sizes = [width, width, width, *self.split[1:]]
        return dict(zip(names, self.in_proj.data.split_with_sizes(sizes), strict=True))

    # --- gates ---------------------------------------------------------------------------------
    def forget_gate(self, f_a: torch.Tensor) -> torch.Tensor:
        """Log-decay g [T, H, dk] in fp32 (always < 0) from the f_a projection [T, dk]."""
        c = self.cfg
        a = linear(f_a, self.f_b_proj).float() + self.dt_bias.float()
        a = a.view(-1, c.kda_heads, c.kda_head_dim)
        rate = self.A_log.float().view(c.kda_heads, 1).exp()
        if c.kda_gate_lower_bound is None:
            return -rate * softplus20(a)
        return c.kda_gate_lower_bound * torch.sigmoid(rate * a)

    # --- forward -------------------------------------------------------------------------------
    def run(self, x: torch.Tensor, ctx: StepContext, ssm: torch.Tensor, conv: torch.Tensor) -> torch.Tensor:
        """x [T, D] → [T, D]; reads and writes this layer's state and conv slots."""
        c = self.cfg
        T, H, d = ctx.num_tokens, c.kda_heads, c.kda_head_dim
        mixed, f_a, gate, b = linear(x, self.in_proj).split_with_sizes(self.split, dim=-1)
        if self.g_b_proj is not None:
            gate = linear(gate, self.g_b_proj)
        groups = [g for g in (ctx.decode, ctx.prefill) if g.size]
        if len(groups) == 1 and groups[0].dense:
            qkv = self._short_conv(mixed, groups[0], conv).view(T, -1)
        else:
            qkv = mixed.new_zeros(T + 1, mixed.shape[1])
            for g in groups:
                scatter_rows(qkv, g.rows, self._short_conv(mixed, g, conv))
            qkv = qkv[:T]
        q, k, v = qkv.float().view(T, 3, H, d).unbind(1)
        q = l2norm(q) * d**-0.5
        k = l2norm(k)
        g_log = self.forget_gate(f_a)
        beta = torch.sigmoid(b).float()
        dec, pre = ctx.decode, ctx.prefill
        if dec.size and dec.dense:
            o = self._recurrent(q, k, v, g_log, beta, dec, ssm, ctx.workspace)
        elif pre.size and not dec.size and ctx.chunks is not None and ctx.chunks.dense:
            o = self._chunked(q, k, v, g_log, beta, pre, ctx.chunks, ssm).reshape(T, H, d)
        else:
            o = q.new_zeros(T + 1, H, d)
            if dec.size:
                rows = dec.rows[:, 0]
                qd, kd, vd, gd, bd = (t.index_select(0, rows) for t in (q, k, v, g_log, beta))
                o.index_copy_(0, rows, self._recurrent(qd, kd, vd, gd, bd, dec, ssm, ctx.workspace))
            if pre.size:
                assert ctx.chunks is not None
                scatter_rows(o, ctx.chunks.rows, self._chunked(q, k, v, g_log, beta, pre, ctx.chunks, ssm))
            o = o[:T]
        out = gated_rms_norm(o.to(x.dtype), self.o_norm, gate.view(T, H, d), c.rms_norm_eps)
        return linear(out.reshape(T, H * d), self.o_proj)

    def _short_conv(self, mixed: torch.Tensor, g: Group, conv: torch.Tensor) -> torch.Tensor:
        """Causal depthwise conv + SiLU over [window, new tokens] per sequence → [B, n_max, 3·H·d].

        Also stores each sequence's last K-1 inputs as its new window, and the window as of the
        checkpoint position into the checkpoint slot. The conv is K shifted multiply-adds (fp32
        accumulation), much cheaper on CPU than a depthwise ``conv1d`` at these sizes.
        """
        K = self.cfg.conv_kernel
        K1 = K - 1
        window = conv.index_select(0, g.state_slots).to(mixed.dtype)  # [B, K-1, ch]
        seq = torch.cat([window, g.gather(mixed)], dim=1)  # [B, K-1 + n_max, ch]
        n = seq.shape[1] - K1
        w = self.conv.float()  # [K, ch]
        src = seq.float()
        acc = src[:, :n] * w[0]
        for j in range(1, K):
            acc.addcmul_(src[:, j : j + n], w[j])
        out = F.silu(acc, inplace=True) if acc.dtype == mixed.dtype else F.silu(acc.to(mixed.dtype))
        if K1:
            if min(g.lengths) == max(g.lengths):
                conv.index_copy_(0, g.state_slots, seq[:, n:].to(conv.dtype))
            else:
                conv.index_copy_(0, g.state_slots, self._windows(seq, list(range(g.size)), g.lengths).to(conv.dtype))
            ck = [b for b, r in enumerate(g.ckpt_rel) if r is not None]
            if ck:
                rel = [r for r in g.ckpt_rel if r is not None]
                conv.index_copy_(0, g.ckpt_slots[ck], self._windows(seq, ck, rel).to(conv.dtype))
        return out

    def _windows(self, seq: torch.Tensor, rows: list[int], ends: list[int]) -> torch.Tensor:
        """The K-1 inputs before relative position ``ends`` of sequences ``rows`` (seq is offset by
        K-1) → [len(rows), K-1, ch]; only those rows are copied."""
        dev = seq.device
        steps = torch.arange(self.cfg.conv_kernel - 1, device=dev)
        idx = torch.tensor(ends, device=dev)[:, None] + steps[None, :]
        return seq[torch.tensor(rows, device=dev)[:, None], idx]

    def _recurrent(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        grp: Group,
        ssm: torch.Tensor,
        ws: Workspace,
    ) -> torch.Tensor:
        """One delta-rule step for each decode sequence; inputs [B, H, d], beta [B, H].

        With D = Diag(e^g): Sᵀk after the decay is Sᵀ(e^g ⊙ k) and the output (D S + k δᵀ)ᵀ q is
        Sᵀ(e^g ⊙ q) + (k·q) δ, so one bmm against the *old* state gives both, and the state is
        read once more to write D S + k δᵀ (it is the largest tensor of a decode step).
        """
        B, H, dk = k.shape
        buf = ws.take("kda.state", (B, *ssm.shape[1:]), ssm.dtype, ssm.device)
        S = torch.index_select(ssm, 0, grp.state_slots, out=buf).view(B * H, dk, -1)  # a copy, updated in place
        decay = g.exp().reshape(B * H, dk)
        qk = torch.stack([q.reshape(B * H, dk), k.reshape(B * H, dk)], dim=1) * decay[:, None, :]
        read = torch.bmm(qk, S)  # [B·H, 2, dv]: Sᵀ(e^g ⊙ q), Sᵀ(e^g ⊙ k)
        delta = (v.reshape(B * H, -1) - read[:, 1]) * beta.reshape(B * H, 1)
        out = torch.addcmul(read[:, 0], (k * q).sum(-1).reshape(B * H, 1), delta)
        S.mul_(decay[:, :, None]).baddbmm_(k.reshape(B * H, dk, 1), delta[:, None, :])
        S = S.view(B, H, dk, -1)
        ssm.index_copy_(0, grp.state_slots, S)
        ck = [b for b, r in enumerate(grp.ckpt_rel) if r is not None]
        if ck:  # a decode checkpoint is always at the end of its one token
            ssm.index_copy_(0, grp.ckpt_slots[ck], S[ck])
        return out.view(B, H, -1)

    def _chunked(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        grp: Group,
        lay: ChunkLayout,
        ssm: torch.Tensor,
    ) -> torch.Tensor:
        """Chunked KDA over the prefill group → outputs laid out as ``lay.rows`` [B, N·C, H, dv]."""
        B, N = grp.size, lay.n_chunks

        def chunks(t: torch.Tensor) -> torch.Tensor:  # [T, H, *] → [B, H, N, C, *], contiguous
            t = t.view(B, -1, *t.shape[1:]) if lay.dense else gather_rows(t, lay.rows)
            return t.view(B, N, -1, *t.shape[2:]).movedim(3, 1).contiguous()

        S = ssm.index_select(0, grp.state_slots)
        out, states = chunk_kda(chunks(q), chunks(k), chunks(v), chunks(g), chunks(beta), S)
        ssm.index_copy_(0, grp.state_slots, states[:, :, N])
        ck = [b for b, r in enumerate(grp.ckpt_rel) if r is not None]
        if ck:
            after = lay.ckpt_chunk[ck] + 1
            ssm[grp.ckpt_slots[ck]] = states[torch.tensor(ck, device=after.device), :, after]
        H, C = out.shape[1], out.shape[3]
        return out.permute(0, 2, 3, 1, 4).reshape(B, N * C, H, -1)

    def tensors(self, prefix: str) -> list[TensorSpec]:
        c = self.cfg
        width, K = c.kda_heads * c.kda_head_dim, c.conv_kernel
        views = self._in_views()
        out = [
            TensorSpec(f"{prefix}{n}.weight", tuple(views[n].shape), views[n]) for n in ("q_proj", "k_proj", "v_proj")
        ]
        for j, n in enumerate(("q_conv1d", "k_conv1d", "v_conv1d")):
            out.append(
                TensorSpec(f"{prefix}{n}.weight", (width, 1, K), self.conv.data[:, j * width : (j + 1) * width].t())
            )
        out += [spec(f"{prefix}A_log", self.A_log), spec(f"{prefix}dt_bias", self.dt_bias)]
        for n in ("f_a_proj", "f_b_proj", "b_proj", "g_proj", "g_a_proj", "g_b_proj", "o_norm", "o_proj"):
            p = views.get(n, getattr(self, n, None))
            if p is not None:
                out.append(TensorSpec(f"{prefix}{n}.weight", tuple(p.shape), p.data))
        return out
