"""A tiny K3: the published ``text_config`` scaled down with every K3 flag on, a random checkpoint
for it, and a plain per-token reference written from the published description (reference doc
§1.2, §2.3, §3.3, §3.4), which reads the checkpoint by its on-disk names and shares no code with
the batched model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from tokenmill.runtime.models import build_model, parse_config


def text_config(**overrides: Any) -> dict[str, Any]:
    """The published K3 text_config, scaled down; ``overrides`` may set a key to None to drop it."""
    cfg: dict[str, Any] = {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 48,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "linear_attn_config": {
            "full_attn_layers": [4, 6],
            "kda_layers": [1, 2, 3, 5],
            "gate_lower_bound": -5.0,
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
        },
        "num_experts": 8,
        "num_experts_per_token": 2,
        "num_shared_experts": 2,
        "moe_intermediate_size": 24,
        "routed_expert_hidden_size": 32,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "topk_method": "noaux_tc",
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "moe_layer_freq": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 2,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "num_nextn_predict_layers": 0,
    }
    for key, value in overrides.items():
        target = cfg["linear_attn_config"] if key in cfg["linear_attn_config"] else cfg
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return cfg


def _init(name: str, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Random weights that keep activations O(1), with sensible gate parameters."""
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=g).log()
    if name.endswith("dt_bias"):
        dt = torch.empty(shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if name.endswith("e_score_correction_bias"):
        return torch.randn(shape, generator=g) * 0.05
    if len(shape) == 1:  # norm weights
        return 1.0 + 0.2 * torch.randn(shape, generator=g)
    if "conv1d" in name:
        return torch.randn(shape, generator=g) * 0.5
    return torch.randn(shape, generator=g) / math.sqrt(shape[-1])


def write_checkpoint(
    path: Path, tc: dict[str, Any], seed: int = 0, prefix: str = "", nested: bool = True
) -> dict[str, torch.Tensor]:
    """config.json (nested under text_config as K3 publishes it, or top-level) + a random
    model.safetensors."""
    path.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    specs = build_model(parse_config(tc), torch.float32, "meta").tensors()
    sd = {s.name: _init(s.name, s.shape, g) for s in specs}
    save_file({prefix + k: v.contiguous() for k, v in sd.items()}, str(path / "model.safetensors"))
    config = {"model_type": "kimi_k3", "text_config": tc} if nested else tc
    (path / "config.json").write_text(json.dumps(config))
    return sd


# --- the per-token reference -----------------------------------------------------------------


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    """SiTU-GLU (§3.3): β·tanh(gate/β)·sigmoid(gate) · β_lin·tanh(up/β_lin)."""
    return beta * torch.tanh(gate / beta) * torch.sigmoid(gate) * (linear_beta * torch.tanh(up / linear_beta))


class Reference:
    """Runs one sequence token by token through every layer; per layer it keeps what a token
    needs from the past (MLA: all earlier latents; KDA: the state S and the last conv inputs)."""

    def __init__(self, sd: dict[str, torch.Tensor], tc: dict[str, Any]) -> None:
        self.sd = {k: v.double() for k, v in sd.items()}
        self.tc = tc
        lac = tc["linear_attn_config"]
        n = tc["num_hidden_layers"]
        self.is_mla = [(i + 1) in lac["full_attn_layers"] for i in range(n)]
        self.is_moe = [i >= tc["first_k_dense_replace"] for i in range(n)]
        self.eps = tc["rms_norm_eps"]
        self.mla_hist: dict[int, list[torch.Tensor]] = {i: [] for i in range(n)}
        H, d = lac["num_heads"], lac["head_dim"]
        self.S = {i: torch.zeros(H, d, d, dtype=torch.float64) for i in range(n)}
        K = lac["short_conv_kernel_size"]
        self.conv_hist = {i: [torch.zeros(3 * H * d, dtype=torch.float64)] * (K - 1) for i in range(n)}

    def w(self, name: str) -> torch.Tensor:
        return self.sd[name]

    def glu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        tc = self.tc
        if tc["hidden_act"] == "situ":
            return situ_glu(gate, up, tc["activation_situ_beta"], tc["activation_situ_linear_beta"])
        return torch.nn.functional.silu(gate) * up

    def mlp(self, x: torch.Tensor, p: str) -> torch.Tensor:
        return self.w(p + "down_proj.weight") @ self.glu(
            self.w(p + "gate_proj.weight") @ x, self.w(p + "up_proj.weight") @ x
        )

    def moe(self, x: torch.Tensor, p: str) -> torch.Tensor:
        """Stable LatentMoE (§3.3) for one token."""
        tc = self.tc
        s = torch.sigmoid(self.w(p + "gate.weight") @ x)
        choice = s + self.w(p + "gate.e_score_correction_bias")
        top = sorted(range(len(s)), key=lambda e: -float(choice[e]))[: tc["num_experts_per_token"]]
        weights = torch.stack([s[e] for e in top])
        if tc["moe_renormalize"]:
            weights = weights / weights.sum()
        weights = weights * tc["routed_scaling_factor"]
        latent = "routed_expert_hidden_size" in tc
        z = self.w(p + "routed_expert_down_proj.weight") @ x if latent else x
        acc = torch.zeros_like(z)
        for e, we in zip(top, weights, strict=True):
            e_p = f"{p}experts.{e}."
            acc = acc + we * (
                self.w(e_p + "w2.weight") @ self.glu(self.w(e_p + "w1.weight") @ z, self.w(e_p + "w3.weight") @ z)
            )
        if latent:
            if tc.get("latent_moe_use_norm"):
                acc = rms(acc, self.w(p + "routed_expert_norm.weight"), self.eps)
            acc = self.w(p + "routed_expert_up_proj.weight") @ acc
        return acc + self.mlp(x, p + "shared_experts.")

    def kda(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """One KDA step (§1.2) for one token of layer i."""
        lac = self.tc["linear_attn_config"]
        H, d, K = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
        p = f"model.layers.{i}.self_attn."
        raw = torch.cat([self.w(p + f"{n}_proj.weight") @ x for n in "qkv"])
        window = [*self.conv_hist[i], raw]  # the last K inputs, oldest first
        self.conv_hist[i] = window[1:]
        kernel = torch.cat([self.w(p + f"{n}_conv1d.weight")[:, 0, :] for n in "qkv"])  # [3Hd, K]
        mixed = torch.nn.functional.silu(sum(kernel[:, j] * window[j] for j in range(K)))
        q, k, v = (t.view(H, d) for t in mixed.split(H * d))
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * d**-0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        a = (self.w(p + "f_b_proj.weight") @ (self.w(p + "f_a_proj.weight") @ x) + self.w(p + "dt_bias")).view(H, d)
        rate = self.w(p + "A_log").view(H, 1).exp()
        lower = lac.get("gate_lower_bound")
        g = lower * torch.sigmoid(rate * a) if lower is not None else -rate * torch.nn.functional.softplus(a)
        beta = torch.sigmoid(self.w(p + "b_proj.weight") @ x)
        if lac.get("use_full_rank_gate"):
            gate = self.w(p + "g_proj.weight") @ x
        else:
            gate = self.w(p + "g_b_proj.weight") @ (self.w(p + "g_a_proj.weight") @ x)
        gate = gate.view(H, d)
        outs = []
        for h in range(H):
            S = self.S[i][h] * g[h].exp()[:, None]
            u = beta[h] * (v[h] - S.T @ k[h])
            S = S + torch.outer(k[h], u)
            self.S[i][h] = S
            o = S.T @ q[h]
            outs.append(rms(o, self.w(p + "o_norm.weight"), self.eps) * torch.sigmoid(gate[h]))
        return self.w(p + "o_proj.weight") @ torch.cat(outs)

    def mla(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """NoPE MLA (§2.3) for one token over all earlier tokens of layer i, expanded per head."""
        tc = self.tc
        H, P, R, V, C = (
            tc["num_attention_heads"],
            tc["qk_nope_head_dim"],
            tc["qk_rope_head_dim"],
            tc["v_head_dim"],
            tc["kv_lora_rank"],
        )
        p = f"model.layers.{i}.self_attn."
        q = self.w(p + "q_b_proj.weight") @ rms(
            self.w(p + "q_a_proj.weight") @ x, self.w(p + "q_a_layernorm.weight"), 1e-6
        )
        q = q.view(H, P + R)
        ckv = self.w(p + "kv_a_proj_with_mqa.weight") @ x
        latent = rms(ckv[:C], self.w(p + "kv_a_layernorm.weight"), 1e-6)
        self.mla_hist[i].append(torch.cat([latent, ckv[C:]]))
        w_kv = self.w(p + "kv_b_proj.weight").view(H, P + V, C)
        outs = []
        for h in range(H):
            keys = torch.stack([torch.cat([w_kv[h, :P] @ c[:C], c[C:]]) for c in self.mla_hist[i]])
            values = torch.stack([w_kv[h, P:] @ c[:C] for c in self.mla_hist[i]])
            probs = torch.softmax(keys @ q[h] * (P + R) ** -0.5, dim=0)
            outs.append(probs @ values)
        o = torch.cat(outs)
        if tc.get("mla_use_output_gate"):
            o = o * torch.sigmoid(self.w(p + "g_proj.weight") @ x)
        return self.w(p + "o_proj.weight") @ o

    def sublayers(self, i: int) -> tuple[Any, Any]:
        p = f"model.layers.{i}."

        def attn(h: torch.Tensor) -> torch.Tensor:
            h = rms(h, self.w(p + "input_layernorm.weight"), self.eps)
            return self.mla(h, i) if self.is_mla[i] else self.kda(h, i)

        def ffn(h: torch.Tensor) -> torch.Tensor:
            h = rms(h, self.w(p + "post_attention_layernorm.weight"), self.eps)
            return self.moe(h, p + "block_sparse_moe.") if self.is_moe[i] else self.mlp(h, p + "mlp.")

        return attn, ffn

    def mix(self, rows: list[torch.Tensor], i: int, which: str) -> torch.Tensor:
        """Block AttnRes aggregation (§3.4) for one token."""
        p = f"model.layers.{i}.{which}_res_"
        scores = torch.stack([self.w(p + "proj.weight")[0] @ rms(r, self.w(p + "norm.weight"), self.eps) for r in rows])
        weights = torch.softmax(scores, dim=0)
        return sum(wj * r for wj, r in zip(weights, rows, strict=True))  # type: ignore[return-value]

    def token(self, token_id: int) -> torch.Tensor:
        """Logits for the next token after feeding ``token_id``."""
        x = self.w("model.embed_tokens.weight")[token_id]
        block = self.tc.get("attn_res_block_size")
        n = self.tc["num_hidden_layers"]
        if not block:
            for i in range(n):
                attn, ffn = self.sublayers(i)
                x = x + attn(x)
                x = x + ffn(x)
        else:
            bank: list[torch.Tensor] = []
            partial: torch.Tensor | None = x  # r_0 = the embedding
            for i in range(n):
                attn, ffn = self.sublayers(i)
                if i % block == 0:
                    assert partial is not None
                    bank.append(partial)
                    partial = None
                a = attn(self.mix(bank if partial is None else [*bank, partial], i, "attn"))
                partial = a if partial is None else partial + a
                partial = partial + ffn(self.mix([*bank, partial], i, "mlp"))
            assert partial is not None
            x = sum(bank) + partial  # type: ignore[assignment]
        return self.w("lm_head.weight") @ rms(x, self.w("model.norm.weight"), self.eps)
