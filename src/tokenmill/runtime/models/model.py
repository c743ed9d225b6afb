"""The decoder stack shared by all families: embeddings, (MLA | KDA) + (MLP | MoE) layers, head.

One class covers DeepSeek-V3 (all layers MLA), Kimi Linear (KDA with an MLA layer every few) and
K3 (Kimi Linear plus its flags); which blocks a layer gets is read from ``ModelConfig``. The stack
runs on the step's concatenated token axis; only attention and KDA look at sequences (through the
``StepContext`` index tensors), everything else is per token.

On-disk names follow transformers' saved files (which are Moonshot's names for Kimi). K3's
additions have no transformers class; their names, chosen in the same style, are
(per layer, under ``model.layers.{i}.``):

* KDA full-rank output gate: ``self_attn.g_proj.weight`` [H·d, D] (instead of g_a_proj/g_b_proj);
  the lower-bounded forget gate reuses ``f_a_proj``, ``f_b_proj``, ``A_log``, ``dt_bias``;
* MLA output gate: ``self_attn.g_proj.weight`` [H·v_head_dim, D];
* Stable LatentMoE: ``block_sparse_moe.routed_expert_down_proj.weight`` [latent, D],
  ``block_sparse_moe.routed_expert_up_proj.weight`` [D, latent],
  ``block_sparse_moe.routed_expert_norm.weight`` [latent], experts ``experts.{e}.w1|w3`` [I, latent]
  and ``w2`` [latent, I]; the router ``gate.weight`` still reads the full D-wide x;
* Attention residuals: ``attn_res_proj.weight`` / ``mlp_res_proj.weight`` [1, D] and
  ``attn_res_norm.weight`` / ``mlp_res_norm.weight`` [D].

A K3 checkpoint whose config is nested under ``text_config`` may prefix all of these with
``language_model.`` (see ``loader``).
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.errors import TokenmillError
from tokenmill.runtime.models.attn_res import mix_rows
from tokenmill.runtime.models.base import CachePools, CausalLM, SeqSlice
from tokenmill.runtime.models.batch import StepContext, Workspace, build_context
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.kda import KDAttention
from tokenmill.runtime.models.mla import MLAttention
from tokenmill.runtime.models.moe import MLP, MoE
from tokenmill.runtime.models.ops import linear, rms_norm
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        self.index = index
        D = cfg.hidden_size
        self.self_attn: MLAttention | KDAttention = (
            MLAttention(cfg, dtype, device) if cfg.attn_types[index] == "mla" else KDAttention(cfg, dtype, device)
        )
        self.mlp: MLP | MoE = (
            MoE(cfg, dtype, device)
            if cfg.mlp_types[index] == "moe"
            else MLP(cfg, D, cfg.intermediate_size, dtype, device)
        )
        self.input_layernorm = new_param((D,), dtype, device)
        self.post_attention_layernorm = new_param((D,), dtype, device)
        self.res: dict[str, nn.Parameter] = {}
        if cfg.attn_res_block_size:
            for name, shape in (
                ("attn_res_proj", (1, D)),
                ("attn_res_norm", (D,)),
                ("mlp_res_proj", (1, D)),
                ("mlp_res_norm", (D,)),
            ):
                p = new_param(shape, dtype, device)
                self.register_parameter(name, p)
                self.res[name] = p

    def attention(self, x: torch.Tensor, ctx: StepContext, pools: CachePools, slot: int) -> torch.Tensor:
        """The attention sub-layer on its (already mixed) input; ``slot`` is the layer's pool index."""
        h = rms_norm(x, self.input_layernorm, self.cfg.rms_norm_eps)
        if isinstance(self.self_attn, MLAttention):
            assert pools.kv is not None
            return self.self_attn.run(h, ctx, pools.kv[slot])
        assert pools.ssm is not None and pools.conv is not None
        return self.self_attn.run(h, ctx, pools.ssm[slot], pools.conv[slot])

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp.run(rms_norm(x, self.post_attention_layernorm, self.cfg.rms_norm_eps))

    def mlp_prefix(self) -> str:
        """Kimi checkpoints name MoE blocks ``block_sparse_moe`` and dense MLPs ``mlp``."""
        if self.cfg.family == "kimi_linear" and isinstance(self.mlp, MoE):
            return "block_sparse_moe."
        return "mlp."

    def tensors(self, prefix: str) -> list[TensorSpec]:
        out = self.self_attn.tensors(f"{prefix}self_attn.") + self.mlp.tensors(prefix + self.mlp_prefix())
        out += [
            spec(f"{prefix}input_layernorm.weight", self.input_layernorm),
            spec(f"{prefix}post_attention_layernorm.weight", self.post_attention_layernorm),
        ]
        out += [spec(f"{prefix}{name}.weight", p) for name, p in self.res.items()]
        return out


class HybridLM(CausalLM):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        dev = torch.device(device)
        self.config = cfg
        self.vocab_size = cfg.vocab_size
        self.dtype = dtype
        self.embed_tokens = new_param((cfg.vocab_size, cfg.hidden_size), dtype, dev)
        self.layer_list = [DecoderLayer(cfg, i, dtype, dev) for i in range(cfg.num_layers)]
        self.layers = nn.ModuleList(self.layer_list)
        self.norm = new_param((cfg.hidden_size,), dtype, dev)
        self.lm_head = (
            self.embed_tokens if cfg.tie_word_embeddings else new_param((cfg.vocab_size, cfg.hidden_size), dtype, dev)
        )
        self.kv_layers = [i for i, t in enumerate(cfg.attn_types) if t == "mla"]
        self.linear_layers = [i for i, t in enumerate(cfg.attn_types) if t == "kda"]
        self.kv_width = cfg.kv_width
        self.ssm_shape = (cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim)
        self.conv_shape = (max(cfg.conv_kernel - 1, 0), 3 * cfg.kda_heads * cfg.kda_head_dim)
        self.workspace = Workspace()  # scratch buffers shared by the layers (they run one at a time)
        self.pool_slot = {
            i: self.kv_layers.index(i) if t == "mla" else self.linear_layers.index(i)
            for i, t in enumerate(cfg.attn_types)
        }

    def tensors(self) -> list[TensorSpec]:
        out = [spec("model.embed_tokens.weight", self.embed_tokens)]
        for i, layer in enumerate(self.layer_list):
            out += layer.tensors(f"model.layers.{i}.")
        out.append(spec("model.norm.weight", self.norm))
        if not self.config.tie_word_embeddings:
            out.append(spec("lm_head.weight", self.lm_head))
        return out

    # --- state slots ---------------------------------------------------------------------------
    def _prepare_states(self, slices: list[SeqSlice], pools: CachePools) -> None:
        """Restore prefix-hit states, and clear the slot of any sequence starting from scratch."""
        if not self.linear_layers:
            return
        if pools.ssm is None or pools.conv is None:
            raise TokenmillError("this model has linear-attention layers: the pools need ssm and conv")
        dst = [s.state_slot for s in slices if s.restore_slot is not None]
        if dst:
            src = [s.restore_slot for s in slices if s.restore_slot is not None]
            pools.ssm[:, dst] = pools.ssm[:, src]
            pools.conv[:, dst] = pools.conv[:, src]
        fresh = [s.state_slot for s in slices if s.restore_slot is None and s.start == 0]
        if fresh:
            pools.ssm[:, fresh] = 0
            pools.conv[:, fresh] = 0

    # --- forward -------------------------------------------------------------------------------
    def forward_slices(self, slices: list[SeqSlice], pools: CachePools, *, all_logits: bool = False) -> torch.Tensor:
        if self.kv_layers and pools.kv is None:
            raise TokenmillError("this model has MLA layers: the pools need a kv cache")
        ctx = build_context(slices, pools, self.embed_tokens.device, bool(self.linear_layers), self.workspace)
        self._prepare_states(slices, pools)
        x = self.embed_tokens[ctx.token_ids]
        if self.config.attn_res_block_size:
            x = self._attn_res_stack(x, ctx, pools)
        else:
            for layer in self.layer_list:
                x = x + layer.attention(x, ctx, pools, self.pool_slot[layer.index])
                x = x + layer.feed_forward(x)
        rows = torch.arange(ctx.num_tokens, device=x.device) if all_logits else ctx.logit_rows
        h = rms_norm(x[rows], self.norm, self.config.rms_norm_eps)
        return linear(h, self.lm_head).float()

    def _attn_res_stack(self, x: torch.Tensor, ctx: StepContext, pools: CachePools) -> torch.Tensor:
        """The layer stack with Block Attention Residuals (see ``attn_res``)."""
        block = self.config.attn_res_block_size
        assert block
        eps = self.config.rms_norm_eps
        bank: list[torch.Tensor] = []
        partial: torch.Tensor | None = x  # the running sum; starts as the embedding (r_0)
        for layer in self.layer_list:
            if layer.index % block == 0 and partial is not None:
                bank.append(partial)
                partial = None
            rows = bank if partial is None else [*bank, partial]
            h = mix_rows(rows, layer.res["attn_res_proj"], layer.res["attn_res_norm"], eps)
            a = layer.attention(h, ctx, pools, self.pool_slot[layer.index])
            partial = a if partial is None else partial + a
            h = mix_rows([*bank, partial], layer.res["mlp_res_proj"], layer.res["mlp_res_norm"], eps)
            partial = partial + layer.feed_forward(h)
        assert partial is not None
        return torch.stack([*bank, partial]).sum(0)
