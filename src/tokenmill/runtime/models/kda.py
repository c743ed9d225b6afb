"""Kimi Delta Attention: short convolutions, channel-wise forget gate, delta-rule recurrence.

Per head the state is S ∈ R^{dk×dv} (fp32, one slot per sequence in ``CachePools.ssm``); the short
convolutions keep their last K-1 inputs per channel (``CachePools.conv``). Two forms of the same
recurrence, chosen per group of the step:

* decode (one token): the recurrent step, batched over all decode sequences;
  S ← Diag(e^g) S;  u = β (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq.
* prefill (n > 1): the chunked form of ``naive_chunk_kda`` (chunk 64), batched over the prefill
  sequences; only S crosses chunk boundaries, so a checkpoint position is made a chunk boundary
  (see ``batch.ChunkLayout``) and the state there is exact.

The forget gate is Kimi Linear's g = −e^{A}·softplus(a + dt_bias), or K3's lower-bounded "safe
gate" g = lb·sigmoid(e^{A}·(a + dt_bias)) when ``gate_lower_bound`` is set. The output gate is
Kimi Linear's low rank ``g_b_proj(g_a_proj(x))`` or K3's full rank ``g_proj(x)``
(``use_full_rank_gate``); either feeds ``o_norm`` = RMSNorm(o) ⊙ sigmoid(gate) per head.

The short convolutions always use SiLU: transformers applies ``config.hidden_act`` there, which is
SiLU for Kimi Linear, while K3's ``hidden_act`` (SiTU) is a gated MLP activation and the reference
gives SiLU(conv4(·)) for K3's KDA. On disk: ``self_attn.{q,k,v}_conv1d.weight`` [H·d, 1, K]
(Moonshot's and transformers' saved names), stacked here into one depthwise kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.runtime.models.batch import ChunkLayout, Group, StepContext, gather_rows
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.ops import gated_rms_norm, l2norm, linear, softplus20
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec


class KDAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        H, d, D, K = cfg.kda_heads, cfg.kda_head_dim, cfg.hidden_size, cfg.conv_kernel
        width = H * d
        self.q_proj = new_param((width, D), dtype, device)
        self.k_proj = new_param((width, D), dtype, device)
        self.v_proj = new_param((width, D), dtype, device)
        self.conv = new_param((3 * width, K), dtype, device)  # depthwise kernels of q, k, v, stacked
        self.A_log = new_param((1, 1, H, 1), dtype, device)
        self.dt_bias = new_param((width,), torch.float32, device)  # fp32 as transformers keeps it
        self.f_a_proj = new_param((d, D), dtype, device)
        self.f_b_proj = new_param((width, d), dtype, device)
        self.b_proj = new_param((H, D), dtype, device)
        self.g_proj: nn.Parameter | None = None
        self.g_a_proj: nn.Parameter | None = None
        self.g_b_proj: nn.Parameter | None = None
        if cfg.kda_full_rank_gate:
            self.g_proj = new_param((width, D), dtype, device)
        else:
            self.g_a_proj = new_param((d, D), dtype, device)
            self.g_b_proj = new_param((width, d), dtype, device)
        self.o_norm = new_param((d,), dtype, device)
        self.o_proj = new_param((D, width), dtype, device)

    # --- gates ---------------------------------------------------------------------------------
    def forget_gate(self, x: torch.Tensor) -> torch.Tensor:
        """Log-decay g [T, H, dk] in fp32 (always < 0)."""
        c = self.cfg
        a = linear(linear(x, self.f_a_proj), self.f_b_proj).float() + self.dt_bias.float()
        a = a.view(-1, c.kda_heads, c.kda_head_dim)
        rate = self.A_log.float().view(c.kda_heads, 1).exp()
        if c.kda_gate_lower_bound is None:
            return -rate * softplus20(a)
        return c.kda_gate_lower_bound * torch.sigmoid(rate * a)

    def output_gate(self, x: torch.Tensor) -> torch.Tensor:
        if self.g_proj is not None:
            return linear(x, self.g_proj)
        assert self.g_a_proj is not None and self.g_b_proj is not None
        return linear(linear(x, self.g_a_proj), self.g_b_proj)

    # --- forward -------------------------------------------------------------------------------
    def run(self, x: torch.Tensor, ctx: StepContext, ssm: torch.Tensor, conv: torch.Tensor) -> torch.Tensor:
        """x [T, D] → [T, D]; reads and writes this layer's state and conv slots."""
        c = self.cfg
        T, H, d = ctx.num_tokens, c.kda_heads, c.kda_head_dim
        mixed = torch.cat([linear(x, self.q_proj), linear(x, self.k_proj), linear(x, self.v_proj)], dim=-1)
        qkv = mixed.new_zeros(T + 1, mixed.shape[1])
        for g in (ctx.decode, ctx.prefill):
            if g.size:
                qkv[g.rows] = self._short_conv(mixed, g, conv)
        q, k, v = qkv[:T].float().view(T, 3, H, d).unbind(1)
        q = l2norm(q) * d**-0.5
        k = l2norm(k)
        g_log = self.forget_gate(x)
        beta = torch.sigmoid(linear(x, self.b_proj)).float()
        o = q.new_zeros(T + 1, H, d)
        if ctx.decode.size:
            dec = ctx.decode
            rows = dec.rows[:, 0]
            o[rows] = self._recurrent(q[rows], k[rows], v[rows], g_log[rows], beta[rows], dec, ssm)
        if ctx.prefill.size:
            assert ctx.chunks is not None
            o[ctx.chunks.rows] = self._chunked(q, k, v, g_log, beta, ctx.prefill, ctx.chunks, ssm)
        gate = self.output_gate(x).view(T, H, d)
        out = gated_rms_norm(o[:T].to(x.dtype), self.o_norm, gate, c.rms_norm_eps)
        return linear(out.reshape(T, H * d), self.o_proj)

    def _short_conv(self, mixed: torch.Tensor, g: Group, conv: torch.Tensor) -> torch.Tensor:
        """Causal depthwise conv + SiLU over [window, new tokens] per sequence → [B, n_max, 3·H·d].

        Also stores each sequence's last K-1 inputs as its new window, and the window as of the
        checkpoint position into the checkpoint slot.
        """
        K1 = self.cfg.conv_kernel - 1
        window = conv[g.state_slots].transpose(1, 2).to(mixed.dtype)  # [B, K-1, ch]
        seq = torch.cat([window, gather_rows(mixed, g.rows)], dim=1)  # [B, K-1 + n_max, ch]
        w = self.conv
        out = F.silu(F.conv1d(seq.transpose(1, 2).to(w.dtype), w[:, None, :], groups=w.shape[0]))
        steps = torch.arange(K1, device=seq.device)
        ends = torch.tensor(g.lengths, device=seq.device)
        conv[g.state_slots] = self._windows(seq, ends, steps).to(conv.dtype)
        ck = [b for b, r in enumerate(g.ckpt_rel) if r is not None]
        if ck:
            rel = torch.tensor([g.ckpt_rel[b] for b in ck], device=seq.device)
            conv[g.ckpt_slots[ck]] = self._windows(seq[ck], rel, steps).to(conv.dtype)
        return out.transpose(1, 2).to(mixed.dtype)

    @staticmethod
    def _windows(seq: torch.Tensor, ends: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        """The K-1 inputs before relative position ``ends`` (seq is offset by K-1) → [B, ch, K-1]."""
        idx = (ends[:, None] + steps[None, :])[:, :, None].expand(-1, -1, seq.shape[2])
        return seq.gather(1, idx).transpose(1, 2)

    def _recurrent(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        grp: Group,
        ssm: torch.Tensor,
    ) -> torch.Tensor:
        """One delta-rule step for each decode sequence; inputs [B, H, d], beta [B, H]."""
        S = ssm[grp.state_slots] * g.exp()[..., None]
        delta = (v - torch.einsum("bhk,bhkv->bhv", k, S)) * beta[..., None]
        S = S + k[..., None] * delta[..., None, :]
        ssm[grp.state_slots] = S
        ck = [b for b, r in enumerate(grp.ckpt_rel) if r is not None]
        if ck:  # a decode checkpoint is always at the end of its one token
            ssm[grp.ckpt_slots[ck]] = S[ck]
        return torch.einsum("bhk,bhkv->bhv", q, S)

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
        H, d = self.cfg.kda_heads, self.cfg.kda_head_dim

        def chunks(t: torch.Tensor) -> torch.Tensor:  # [T, H, *] → [B, H, N, C, *]
            t = gather_rows(t, lay.rows)
            return t.view(B, N, -1, *t.shape[2:]).movedim(3, 1)

        qc, kc, vc, gc = chunks(q), chunks(k), chunks(v), chunks(g).cumsum(dim=-2)
        bc = chunks(beta[..., None])[..., 0]
        C = qc.shape[3]
        upper = torch.triu(torch.ones(C, C, dtype=torch.bool, device=q.device), diagonal=1)
        S = ssm[grp.state_slots]  # [B, H, dk, dv]
        S_ckpt = torch.zeros_like(S)
        out = torch.empty_like(vc)
        for i in range(N):
            qi, ki, vi, gi, bi = qc[:, :, i], kc[:, :, i], vc[:, :, i], gc[:, :, i], bc[:, :, i]
            # decay[a, b, :] = exp(Γ_a − Γ_b) for b <= a, 0 above the diagonal (kept per channel).
            decay = (gi[..., :, None, :] - gi[..., None, :, :]).masked_fill(upper[..., None], float("-inf")).exp()
            kb = ki * bi[..., None]
            a_kk = (kb[..., :, None, :] * ki[..., None, :, :] * decay).sum(-1)
            # WY/UT transform: solve (I + strictly-lower A_kk) X = [βV | β e^Γ K].
            rhs = torch.cat([vi * bi[..., None], kb * gi.exp()], dim=-1)
            x = torch.linalg.solve_triangular(a_kk, rhs, upper=False, unitriangular=True)
            u, w = x[..., :d], x[..., d:]
            a_qk = (qi[..., :, None, :] * ki[..., None, :, :] * decay).sum(-1)  # zero above the diagonal
            v_new = u - w @ S
            out[:, :, i] = (qi * gi.exp()) @ S + a_qk @ v_new
            g_last = gi[..., -1:, :]
            S = S * g_last.transpose(-1, -2).exp() + (ki * (g_last - gi).exp()).transpose(-1, -2) @ v_new
            S_ckpt = torch.where((lay.ckpt_chunk == i)[:, None, None, None], S, S_ckpt)
        ssm[grp.state_slots] = S
        ck = [b for b, r in enumerate(grp.ckpt_rel) if r is not None]
        if ck:
            ssm[grp.ckpt_slots[ck]] = S_ckpt[ck]
        return out.movedim(1, 3).reshape(B, N * C, H, d)

    def tensors(self, prefix: str) -> list[TensorSpec]:
        c = self.cfg
        width, K = c.kda_heads * c.kda_head_dim, c.conv_kernel
        out = [spec(f"{prefix}{n}.weight", getattr(self, n)) for n in ("q_proj", "k_proj", "v_proj")]
        for j, n in enumerate(("q_conv1d", "k_conv1d", "v_conv1d")):
            out.append(TensorSpec(f"{prefix}{n}.weight", (width, 1, K), self.conv.data[j * width : (j + 1) * width]))
        out += [spec(f"{prefix}A_log", self.A_log), spec(f"{prefix}dt_bias", self.dt_bias)]
        for n in ("f_a_proj", "f_b_proj", "b_proj", "g_proj", "g_a_proj", "g_b_proj", "o_norm", "o_proj"):
            p = getattr(self, n)
            if p is not None:
                out.append(spec(f"{prefix}{n}.weight", p))
        return out
