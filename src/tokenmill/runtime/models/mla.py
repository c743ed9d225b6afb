"""Multi-head Latent Attention over a paged latent cache (DeepSeek-V3, Kimi Linear, K3).

Per token the cache holds one ``kv_width`` row: the normalised latent c_kv (kv_lora_rank) and the
shared rope key slice k_pe (qk_rope_head_dim), i.e. DeepSeek's 576 values. Two forms of the same
attention, chosen per group of the step by arithmetic cost (``_attend``):

* absorbed: fold W_UK into the query, score the latents directly (MQA over the cache: every head
  reads the same rows) and apply W_UV after the softmax, so per-head keys and values are never
  materialised. Always taken by decode, and by prefill when the context is long next to the new
  tokens (a chunk of a long prompt) or the latent is narrow (Kimi's 64 + 32). Small problems run
  as two bmms, large ones through SDPA's flash kernel.
* expanded (the "compute friendly" form): run the context latents through ``kv_b_proj`` into
  per-head keys and values and do ordinary masked attention; cheaper for a fresh prompt with a
  wide latent (DeepSeek's 512 against 128 + 128 per head).

q_proj (or q_a_proj) and kv_a_proj_with_mqa are one fused matrix ``in_proj``.
Kimi's MLA is NoPE (``rope`` is None: the rope slice is never rotated). K3 adds an output gate,
``attn ⊙ sigmoid(W_g x)`` before ``o_proj`` (``self_attn.g_proj.weight`` [H·v_head_dim, D]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.runtime.models import native
from tokenmill.runtime.models.batch import Group, StepContext, scatter_rows
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.ops import linear, rms_norm
from tokenmill.runtime.models.rope import apply_rope, cos_sin, inv_freq_and_scale
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec

LATENT_NORM_EPS = 1e-6  # transformers builds q_a_layernorm / kv_a_layernorm without the config eps
EXPLICIT_SCORES = 1 << 18  # absorbed attention with at most this many scores per sequence: plain bmms
FORCE_FORM: str | None = None  # "expanded" or "absorbed" overrides the cost model (tests use it)
NATIVE_DECODE = True  # decode through native.mla_decode where it applies (tests turn it off to compare)


def _use_native(flat: torch.Tensor, q: torch.Tensor) -> bool:
    """The C decode kernel applies to fp32 on the CPU with one torch thread (see ``native``)."""
    return (
        NATIVE_DECODE
        and flat.dtype == q.dtype == torch.float32
        and flat.device.type == "cpu"
        and torch.get_num_threads() == 1
        and native.available()
    )


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """``scaled_dot_product_attention`` with q·k and v zero-padded to one head width.

    CPU's flash kernel (tiled, no n × L score matrix) needs equal widths; otherwise SDPA falls
    back to its math path, which materialises every score (hundreds of MiB for a long prompt).
    Zero columns change no dot product and no output column that is kept.
    """
    dq, dv = q.shape[-1], v.shape[-1]
    if dq > dv:
        v = F.pad(v, (0, dq - dv))
    elif dv > dq:
        q, k = F.pad(q, (0, dv - dq)), F.pad(k, (0, dv - dq))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)[..., :dv]


class MLAttention(nn.Module):
    inv_freq: torch.Tensor | None

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        H, D = cfg.num_heads, cfg.hidden_size
        # The two projections of x, fused into one matmul: q_proj (or q_a_proj), kv_a_proj_with_mqa.
        q_width = H * cfg.qk_head_dim if cfg.q_lora_rank is None else cfg.q_lora_rank
        self.split = [q_width, cfg.kv_width]
        self.in_proj = new_param((q_width + cfg.kv_width, D), dtype, device)
        self.q_a_layernorm: nn.Parameter | None = None
        self.q_b_proj: nn.Parameter | None = None
        if cfg.q_lora_rank is not None:
            self.q_a_layernorm = new_param((cfg.q_lora_rank,), dtype, device)
            self.q_b_proj = new_param((H * cfg.qk_head_dim, cfg.q_lora_rank), dtype, device)
        self.kv_a_layernorm = new_param((cfg.kv_lora_rank,), dtype, device)
        self.kv_b_proj = new_param((H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank), dtype, device)
        self.o_proj = new_param((D, H * cfg.v_head_dim), dtype, device)
        self.g_proj = new_param((H * cfg.v_head_dim, D), dtype, device) if cfg.mla_output_gate else None
        # transformers puts biases on q_a / kv_a / o_proj only; q_proj's rows of the fused bias stay 0.
        self.in_proj_bias: nn.Parameter | None = None
        self.o_proj_bias: nn.Parameter | None = None
        if cfg.attention_bias:
            self.in_proj_bias = nn.Parameter(torch.zeros(sum(self.split), dtype=dtype, device=device), False)
            self.o_proj_bias = new_param((D,), dtype, device)
        self.rope_scale = 1.0
        inv_freq = None
        if cfg.rope is not None:
            inv_freq, self.rope_scale = inv_freq_and_scale(cfg.rope)
            inv_freq = inv_freq.to(device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def run(self, x: torch.Tensor, ctx: StepContext, cache: torch.Tensor) -> torch.Tensor:
        """x [T, D] → attention output [T, D]; writes this step's latents into ``cache`` first."""
        c = self.cfg
        T, H, P, V, C = ctx.num_tokens, c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank
        q, kv = linear(x, self.in_proj, self.in_proj_bias).split_with_sizes(self.split, dim=-1)
        if self.q_b_proj is not None:
            assert self.q_a_layernorm is not None
            q = linear(rms_norm(q, self.q_a_layernorm, LATENT_NORM_EPS), self.q_b_proj)
        q = q.reshape(T, H, c.qk_head_dim)
        latent, k_pe = kv[..., :C], kv[..., C:]
        latent = rms_norm(latent, self.kv_a_layernorm, LATENT_NORM_EPS)
        q_nope, q_pe = q[..., :P], q[..., P:]
        if c.rope is not None and self.inv_freq is not None:
            # Every MLA layer has the same rope (one config): compute cos/sin once per step.
            key = ("rope", c.rope, self.rope_scale, x.dtype)
            cs = ctx.memo.get(key)
            if cs is None:
                cs = ctx.memo[key] = cos_sin(self.inv_freq, self.rope_scale, ctx.positions, x.dtype)
            cos, sin = cs
            q_pe = apply_rope(q_pe, cos, sin, c.rope.interleave)
            k_pe = apply_rope(k_pe, cos, sin, c.rope.interleave)
        flat = cache.view(-1, c.kv_width)
        flat.index_copy_(0, ctx.slot_mapping, torch.cat([latent, k_pe], dim=-1).to(cache.dtype))

        groups = [g for g in (ctx.decode, ctx.prefill) if g.size]
        if len(groups) == 1 and groups[0].dense:
            out = self._attend(q_nope, q_pe, flat, groups[0], ctx).reshape(T, H * V)
        else:
            buf = x.new_zeros(T + 1, H, V)  # + the padding row, dropped below
            for g in groups:
                scatter_rows(buf, g.rows, self._attend(q_nope, q_pe, flat, g, ctx))
            out = buf[:T].reshape(T, H * V)
        if self.g_proj is not None:
            out = out * torch.sigmoid(linear(x, self.g_proj))
        return linear(out, self.o_proj, self.o_proj_bias)

    # --- attention over the cached latents ----------------------------------------------------
    def _attend(
        self, q_nope: torch.Tensor, q_pe: torch.Tensor, flat: torch.Tensor, g: Group, ctx: StepContext
    ) -> torch.Tensor:
        """One group's attention → [B, n_max, H, V].

        Two equivalent forms, chosen by arithmetic cost: the *absorbed* form folds W_UK into the
        query and W_UV after the softmax, so attention runs as MQA over the latents and per-head
        keys and values are never materialised (always for decode, and for prefill when the
        context is long next to the new tokens); the *expanded* form runs the context latents
        through ``kv_b_proj`` once and does ordinary attention (cheaper when most of the context
        is new and the latent is wide, e.g. DeepSeek's 512 against 128 + 128 per head).
        """
        c = self.cfg
        H, P, V, C, R = c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank, c.qk_rope_head_dim
        B, n = g.rows.shape
        L = g.kv_slots.shape[1]
        qn, qp = g.gather(q_nope), g.gather(q_pe)  # [B, n, H, *]
        w_kv = self.kv_b_proj.view(H, P + V, C)
        if n == 1 and FORCE_FORM != "expanded" and _use_native(flat, q_nope):
            # Decode through the C kernel: the latents straight from the pool (no gather), and
            # both absorptions (W_UK into the query, W_UV after the softmax) done per sequence.
            ws = ctx.workspace.take("mla.native", (H * L + B * H * (2 * C + R),), torch.float32, flat.device)
            qn1, qp1 = qn.reshape(B, H, P).contiguous(), qp.reshape(B, H, R).contiguous()
            # build_context checked every page id against the pool: no need to scan the cells again.
            out = native.mla_decode(flat, g.kv_slots, g.context, qn1, qp1, w_kv, c.softmax_scale, ws, check=False)
            return out[:, None]
        cells = g.kv_slots.reshape(-1)
        buf = ctx.workspace.take("mla.cached", (B * L, C + R), flat.dtype, flat.device)
        cached = torch.index_select(flat, 0, cells, out=buf).view(B, L, C + R).to(q_nope.dtype)
        if n == 1:
            allowed = g.kv_valid[:, None, None, :]
        else:
            # Causal over absolute positions: query at position p sees keys 0..p. Padded queries sit
            # at position 0 and see key 0, so no row is fully masked (their output is discarded).
            keys = torch.arange(L, device=qn.device)
            allowed = ((keys[None, None, :] <= g.positions[:, :, None]) & g.kv_valid[:, None, :])[:, None]
        # Multiply-adds per sequence and head of each form (the shared projections aside).
        expanded = L * C * (P + V) + n * L * (P + R + V)
        absorbed = n * C * (P + V) + n * L * (2 * C + R)
        if FORCE_FORM == "expanded" or (FORCE_FORM is None and expanded < absorbed):
            kv = linear(cached[..., :C], self.kv_b_proj).view(B, L, H, P + V)
            k = torch.cat([kv[..., :P], cached[:, :, None, C:].expand(B, L, H, R)], dim=-1)
            q = torch.cat([qn, qp], dim=-1)
            v = kv[..., P:].transpose(1, 2)
            return _sdpa(q.transpose(1, 2), k.transpose(1, 2), v, allowed, c.softmax_scale).transpose(1, 2)
        q_lat = torch.einsum("bnhp,hpc->bhnc", qn, w_kv[:, :P])
        q = torch.cat([q_lat, qp.transpose(1, 2)], dim=-1)  # [B, H, n, C + R]
        if H * n * L <= EXPLICIT_SCORES:
            # Small (decode): every head scores the same latents, so fold the heads into the query
            # rows and use two plain bmms (SDPA's math path would materialise the expanded keys).
            # Scores come out key-major, [B, L, H·n]: the cache is then the streamed left operand,
            # which MKL reads about twice as fast as a transposed right operand at H·n this small.
            scores = (cached @ q.reshape(B, H * n, C + R).transpose(1, 2)).view(B, L, H, n)
            keep = allowed[:, 0].transpose(1, 2)[:, :, None, :]  # [B, L, 1, n]
            scores = (scores * c.softmax_scale).float().masked_fill(~keep, float("-inf"))
            probs = torch.softmax(scores, dim=1).to(q.dtype).view(B, L, H * n)
            o_lat = (probs.transpose(1, 2) @ cached[..., :C]).view(B, H, n, C)
        else:
            # The values are the latents, i.e. the keys' first C columns: passing the whole key as
            # the value keeps q, k and v one width (what the flash kernel needs); drop the rest.
            kv_all = cached[:, None].expand(B, H, L, C + R)
            o_lat = _sdpa(q, kv_all, kv_all, allowed, c.softmax_scale)[..., :C]  # [B, H, n, C]
        return torch.einsum("bhnc,hvc->bnhv", o_lat, w_kv[:, P:])

    def tensors(self, prefix: str) -> list[TensorSpec]:
        q_name = "q_proj" if self.q_b_proj is None else "q_a_proj"
        q_rows, kv_rows = self.in_proj.data.split_with_sizes(self.split)
        out = [
            TensorSpec(f"{prefix}{q_name}.weight", tuple(q_rows.shape), q_rows),
            TensorSpec(f"{prefix}kv_a_proj_with_mqa.weight", tuple(kv_rows.shape), kv_rows),
        ]
        for name in ("q_a_layernorm", "q_b_proj", "kv_a_layernorm", "kv_b_proj", "o_proj", "g_proj"):
            p = getattr(self, name)
            if p is not None:
                out.append(spec(f"{prefix}{name}.weight", p))
        if self.in_proj_bias is not None and self.o_proj_bias is not None:
            q_bias, kv_bias = self.in_proj_bias.data.split_with_sizes(self.split)
            if self.q_b_proj is not None:
                out.append(TensorSpec(f"{prefix}q_a_proj.bias", tuple(q_bias.shape), q_bias))
            out += [
                TensorSpec(f"{prefix}kv_a_proj_with_mqa.bias", tuple(kv_bias.shape), kv_bias),
                spec(f"{prefix}o_proj.bias", self.o_proj_bias),
            ]
        return out
