"""Multi-head Latent Attention over a paged latent cache (DeepSeek-V3, Kimi Linear, K3).

Per token the cache holds one ``kv_width`` row: the normalised latent c_kv (kv_lora_rank) and the
shared rope key slice k_pe (qk_rope_head_dim), i.e. DeepSeek's 576 values. Two read paths:

* prefill (the "compute friendly" form): expand the context latents through ``kv_b_proj`` into
  per-head keys and values and run ordinary masked attention, batched over the prefill slices;
* decode (the "absorbed" form): fold W_UK into the query, score the 512-dim latent directly
  (MQA over the cache), and apply W_UV after the softmax, so per-head keys and values are never
  materialised, one batched matmul per layer for all decode sequences.

Kimi's MLA is NoPE (``rope`` is None: the rope slice is never rotated). K3 adds an output gate,
``attn ⊙ sigmoid(W_g x)`` before ``o_proj`` (``self_attn.g_proj.weight`` [H·v_head_dim, D]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.runtime.models.batch import StepContext, gather_rows
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.ops import linear, rms_norm
from tokenmill.runtime.models.rope import apply_rope, cos_sin, inv_freq_and_scale
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec

LATENT_NORM_EPS = 1e-6  # transformers builds q_a_layernorm / kv_a_layernorm without the config eps


class MLAttention(nn.Module):
    inv_freq: torch.Tensor | None

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        H, D = cfg.num_heads, cfg.hidden_size
        self.q_proj: nn.Parameter | None = None
        self.q_a_proj: nn.Parameter | None = None
        self.q_a_layernorm: nn.Parameter | None = None
        self.q_b_proj: nn.Parameter | None = None
        if cfg.q_lora_rank is None:
            self.q_proj = new_param((H * cfg.qk_head_dim, D), dtype, device)
        else:
            self.q_a_proj = new_param((cfg.q_lora_rank, D), dtype, device)
            self.q_a_layernorm = new_param((cfg.q_lora_rank,), dtype, device)
            self.q_b_proj = new_param((H * cfg.qk_head_dim, cfg.q_lora_rank), dtype, device)
        self.kv_a_proj_with_mqa = new_param((cfg.kv_width, D), dtype, device)
        self.kv_a_layernorm = new_param((cfg.kv_lora_rank,), dtype, device)
        self.kv_b_proj = new_param((H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank), dtype, device)
        self.o_proj = new_param((D, H * cfg.v_head_dim), dtype, device)
        self.g_proj = new_param((H * cfg.v_head_dim, D), dtype, device) if cfg.mla_output_gate else None
        self.biases: dict[str, nn.Parameter] = {}
        if cfg.attention_bias:  # transformers puts biases on q_a / kv_a / o_proj only
            names = ["kv_a_proj_with_mqa", "o_proj", "q_a_proj" if cfg.q_lora_rank is not None else ""]
            for name in filter(None, names):
                bias = new_param((getattr(self, name).shape[0],), dtype, device)
                self.register_parameter(f"{name}_bias", bias)
                self.biases[name] = bias
        self.rope_scale = 1.0
        inv_freq = None
        if cfg.rope is not None:
            inv_freq, self.rope_scale = inv_freq_and_scale(cfg.rope)
            inv_freq = inv_freq.to(device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    # --- projections ---------------------------------------------------------------------------
    def _query(self, x: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        if self.q_proj is not None:
            q = linear(x, self.q_proj)
        else:
            assert self.q_a_proj is not None and self.q_a_layernorm is not None and self.q_b_proj is not None
            q = linear(x, self.q_a_proj, self.biases.get("q_a_proj"))
            q = linear(rms_norm(q, self.q_a_layernorm, LATENT_NORM_EPS), self.q_b_proj)
        return q.view(-1, c.num_heads, c.qk_head_dim)

    def run(self, x: torch.Tensor, ctx: StepContext, cache: torch.Tensor) -> torch.Tensor:
        """x [T, D] → attention output [T, D]; writes this step's latents into ``cache`` first."""
        c = self.cfg
        H, P, V, C = c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank
        q = self._query(x)
        kv = linear(x, self.kv_a_proj_with_mqa, self.biases.get("kv_a_proj_with_mqa"))
        latent, k_pe = kv[..., :C], kv[..., C:]
        latent = rms_norm(latent, self.kv_a_layernorm, LATENT_NORM_EPS)
        q_nope, q_pe = q[..., :P], q[..., P:]
        if c.rope is not None and self.inv_freq is not None:
            cos, sin = cos_sin(self.inv_freq, self.rope_scale, ctx.positions, x.dtype)
            q_pe = apply_rope(q_pe, cos, sin, c.rope.interleave)
            k_pe = apply_rope(k_pe, cos, sin, c.rope.interleave)
        flat = cache.view(-1, c.kv_width)
        flat[ctx.slot_mapping] = torch.cat([latent, k_pe], dim=-1).to(cache.dtype)

        out = x.new_zeros(ctx.num_tokens + 1, H, V)  # + the padding row, dropped below
        w_kv = self.kv_b_proj.view(H, P + V, C)
        if ctx.decode.size:
            g = ctx.decode
            rows = g.rows[:, 0]
            out[rows] = self._decode(q_nope[rows], q_pe[rows], flat[g.kv_slots], g.kv_valid, w_kv)
        if ctx.prefill.size:
            g = ctx.prefill
            q_full = torch.cat([q_nope, q_pe], dim=-1)
            out[g.rows] = self._prefill(gather_rows(q_full, g.rows), flat[g.kv_slots], g.positions, g.kv_valid)
        o = out[: ctx.num_tokens].reshape(ctx.num_tokens, H * V)
        if self.g_proj is not None:
            o = o * torch.sigmoid(linear(x, self.g_proj))
        return linear(o, self.o_proj, self.biases.get("o_proj"))

    # --- the two read paths --------------------------------------------------------------------
    def _decode(
        self, q_nope: torch.Tensor, q_pe: torch.Tensor, cached: torch.Tensor, valid: torch.Tensor, w_kv: torch.Tensor
    ) -> torch.Tensor:
        """Absorbed MQA over the latents. q_nope [B, H, P], q_pe [B, H, R], cached [B, L, C+R]."""
        c = self.cfg
        P, C = c.qk_nope_head_dim, c.kv_lora_rank
        w_uk, w_uv = w_kv[:, :P, :], w_kv[:, P:, :]  # [H, P, C], [H, V, C]
        latent, k_pe = cached[..., :C].to(q_nope.dtype), cached[..., C:].to(q_nope.dtype)
        q_lat = torch.einsum("bhp,hpc->bhc", q_nope, w_uk)
        scores = torch.einsum("bhc,blc->bhl", q_lat, latent) + torch.einsum("bhr,blr->bhl", q_pe, k_pe)
        scores = (scores * c.softmax_scale).float().masked_fill(~valid[:, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q_nope.dtype)
        o_lat = torch.einsum("bhl,blc->bhc", probs, latent)
        return torch.einsum("bhc,hvc->bhv", o_lat, w_uv)

    def _prefill(
        self, q: torch.Tensor, cached: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Expanded attention. q [B, n, H, P+R], cached [B, L, C+R] → [B, n, H, V]."""
        c = self.cfg
        H, P, V, C = c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank
        B, L = cached.shape[:2]
        latent, k_pe = cached[..., :C].to(q.dtype), cached[..., C:].to(q.dtype)
        kv = linear(latent, self.kv_b_proj).view(B, L, H, P + V)
        k_nope, v = kv[..., :P], kv[..., P:]
        k = torch.cat([k_nope, k_pe[:, :, None, :].expand(B, L, H, c.qk_rope_head_dim)], dim=-1)
        # Causal over absolute positions: query at position p sees keys 0..p. Padded queries sit at
        # position 0 and see key 0, so no row is fully masked (their output is discarded).
        allowed = (torch.arange(L, device=q.device)[None, None, :] <= positions[:, :, None]) & valid[:, None, :]
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allowed[:, None], scale=c.softmax_scale
        )
        return o.transpose(1, 2)

    def tensors(self, prefix: str) -> list[TensorSpec]:
        out = []
        for name in (
            "q_proj",
            "q_a_proj",
            "q_a_layernorm",
            "q_b_proj",
            "kv_a_proj_with_mqa",
            "kv_a_layernorm",
            "kv_b_proj",
            "o_proj",
            "g_proj",
        ):
            p = getattr(self, name)
            if p is not None:
                out.append(spec(f"{prefix}{name}.weight", p))
        out += [spec(f"{prefix}{name}.bias", b) for name, b in self.biases.items()]
        return out
