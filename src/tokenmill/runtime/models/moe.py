"""Dense MLPs and the routed MoE block (DeepSeek-V3, Kimi Linear, and K3's Stable LatentMoE).

All three share one router (sigmoid scores, ``e_score_correction_bias`` used only to *choose*,
optional group-limited top-k) and one expert bank; K3 adds a latent projection around the experts:
``y = W_up · RMSNorm(Σ_e w_e E_e(W_down x)) + Shared(x)``. The norm acts on the *sum* of expert
outputs, so under expert parallelism partial sums must be reduced before it (reference §3.3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.runtime.models import native
from tokenmill.runtime.models.config import ModelConfig
from tokenmill.runtime.models.ops import glu, linear, rms_norm
from tokenmill.runtime.models.weights import TensorSpec, new_param, spec

# torch.nn.functional.grouped_mm (torch >= 2.9; CPU, fp32 and bf16): the experts in one call each
# for w13 and w2. False (or an older torch) takes the per-expert loop; tests compare the two.
GROUPED_MM = hasattr(F, "grouped_mm")
# Batches of at most this many (token, expert) rows run through native.moe_experts (fp32, SiLU, one
# thread); larger ones (prefill) through the grouped matmul, whose blocked GEMMs win there.
NATIVE_DECODE = True
NATIVE_MAX_ROWS = 1024  # measured: the kernel still wins at 1536 rows, MKL at prefill sizes (6000+)


class MLP(nn.Module):
    """Gated MLP: down(act(gate(x)) · up(x)); SiLU-GLU or SiTU-GLU per ``hidden_act``.

    ``gate_proj`` and ``up_proj`` are stacked into one ``w13`` [2I, D] (one matmul)."""

    def __init__(self, cfg: ModelConfig, hidden: int, inter: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        self.w13 = new_param((2 * inter, hidden), dtype, device)
        self.down_proj = new_param((hidden, inter), dtype, device)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        gate, up = linear(x, self.w13).chunk(2, dim=-1)
        return linear(glu(gate, up, c.hidden_act, c.situ_beta, c.situ_linear_beta), self.down_proj)

    def tensors(self, prefix: str) -> list[TensorSpec]:
        gate, up = self.w13.data.chunk(2)
        return [
            TensorSpec(f"{prefix}gate_proj.weight", tuple(gate.shape), gate),
            TensorSpec(f"{prefix}up_proj.weight", tuple(up.shape), up),
            spec(f"{prefix}down_proj.weight", self.down_proj),
        ]


class Router(nn.Module):
    """transformers' ``*TopkRouter``: fp32 scores, bias-corrected choice, group-limited top-k."""

    def __init__(self, cfg: ModelConfig, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        # Kept in fp32 whatever the model dtype, as transformers' _keep_in_fp32_modules_strict does.
        self.weight = new_param((cfg.num_experts, cfg.hidden_size), torch.float32, device)
        self.e_score_correction_bias = new_param((cfg.num_experts,), torch.float32, device)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k weights [T, k] (fp32) and expert ids [T, k] for tokens x [T, D]."""
        c = self.cfg
        scores = linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.e_score_correction_bias
        if c.n_group > 1 and c.topk_group < c.n_group:
            # A group's score is the sum of its two best experts; keep the best topk_group groups.
            grouped = choice.view(-1, c.n_group, c.num_experts // c.n_group)
            group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
            keep = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(c.topk_group, dim=-1)[1], 1.0)
            mask = keep.bool()[:, :, None].expand_as(grouped).reshape(-1, c.num_experts)
            choice = choice.masked_fill(~mask, float("-inf"))
        idx = torch.topk(choice, k=c.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, idx)
        if c.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * c.routed_scaling_factor, idx

    def tensors(self, prefix: str) -> list[TensorSpec]:
        return [
            spec(f"{prefix}weight", self.weight),
            spec(f"{prefix}e_score_correction_bias", self.e_score_correction_bias),
        ]


class Experts(nn.Module):
    """The routed experts, stacked: ``w13`` [E, 2I, D] (gate rows then up rows), ``w2`` [E, D, I].

    Tokens are sorted by expert once, then each hit expert runs one matmul over its tokens: one
    grouped matmul where torch has it, else a loop over experts (at most E per layer), never over
    tokens.
    """

    def __init__(self, cfg: ModelConfig, width: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        inter = cfg.moe_intermediate_size
        self.w13 = new_param((cfg.num_experts, 2 * inter, width), dtype, device)
        self.w2 = new_param((cfg.num_experts, width, inter), dtype, device)

    def run(self, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        k = idx.shape[1]
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // k
        xs = x.index_select(0, token)
        if (
            NATIVE_DECODE
            and xs.shape[0] <= NATIVE_MAX_ROWS
            and c.hidden_act == "silu"
            and x.dtype == self.w13.dtype == torch.float32
            and x.device.type == "cpu"
            and torch.get_num_threads() == 1
            and native.available()
        ):
            # Decode-sized: a few tokens per expert, where the C kernel (each weight row loaded
            # once per 4 tokens, no per-expert dispatch) beats MKL's small products; see native.
            per_expert = torch.bincount(flat, minlength=c.num_experts)
            ys = native.moe_experts(xs, per_expert, self.w13, self.w2)
        elif GROUPED_MM:
            # One grouped matmul per projection over the expert-sorted tokens: the same per-expert
            # products as the loop below, but the loop runs in C++ (at decode sizes, 2-12 tokens per
            # expert, the Python loop's ~10 ops per hit expert were a third of the MoE's time).
            offs = torch.bincount(flat, minlength=c.num_experts).cumsum(0).to(torch.int32)
            gate, up = F.grouped_mm(xs, self.w13.transpose(1, 2), offs=offs).chunk(2, dim=-1)
            act = glu(gate, up, c.hidden_act, c.situ_beta, c.situ_linear_beta)
            ys = F.grouped_mm(act, self.w2.transpose(1, 2), offs=offs)
        else:
            # One host read of the per-expert counts (free on CPU); measured against a padded
            # [E, capacity, D] bmm and a dense all-experts pass, this loop over the hit experts is
            # the fastest at 1-4096 tokens (the bmm pays for padding and two scatters, dense for
            # E/k× the flops).
            counts = torch.bincount(flat, minlength=c.num_experts).tolist()
            ys = torch.empty_like(xs)
            start = 0
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                seg = xs[start : start + n]
                gate, up = linear(seg, self.w13[e]).chunk(2, dim=-1)
                ys[start : start + n] = linear(glu(gate, up, c.hidden_act, c.situ_beta, c.situ_linear_beta), self.w2[e])
                start += n
        weighted = (ys * weights.reshape(-1)[order][:, None]).to(x.dtype)
        return torch.zeros_like(x).index_add_(0, token, weighted)

    def tensors(self, prefix: str, names: tuple[str, str, str]) -> list[TensorSpec]:
        """Per-expert disk tensors ``{prefix}{e}.{gate|up|down}.weight`` into the stacked views."""
        gate, up, down = names
        inter = self.cfg.moe_intermediate_size
        out: list[TensorSpec] = []
        for e in range(self.cfg.num_experts):
            out += [
                TensorSpec(f"{prefix}{e}.{gate}.weight", tuple(self.w13[e, :inter].shape), self.w13.data[e, :inter]),
                TensorSpec(f"{prefix}{e}.{up}.weight", tuple(self.w13[e, inter:].shape), self.w13.data[e, inter:]),
                TensorSpec(f"{prefix}{e}.{down}.weight", tuple(self.w2[e].shape), self.w2.data[e]),
            ]
        return out


class MoE(nn.Module):
    """Router + experts (+ latent down/up and norm for K3) + unweighted shared experts."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        self.gate = Router(cfg, device)
        width = cfg.latent_dim or cfg.hidden_size
        self.experts = Experts(cfg, width, dtype, device)
        self.routed_expert_down_proj: nn.Parameter | None = None
        self.routed_expert_up_proj: nn.Parameter | None = None
        self.routed_expert_norm: nn.Parameter | None = None
        if cfg.latent_dim is not None:
            self.routed_expert_down_proj = new_param((cfg.latent_dim, cfg.hidden_size), dtype, device)
            self.routed_expert_up_proj = new_param((cfg.hidden_size, cfg.latent_dim), dtype, device)
            if cfg.latent_norm:
                self.routed_expert_norm = new_param((cfg.latent_dim,), dtype, device)
        self.shared_experts: MLP | None = None
        if cfg.num_shared_experts > 0:
            inter = cfg.moe_intermediate_size * cfg.num_shared_experts
            self.shared_experts = MLP(cfg, cfg.hidden_size, inter, dtype, device)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        weights, idx = self.gate.route(x)
        h = x if self.routed_expert_down_proj is None else linear(x, self.routed_expert_down_proj)
        y = self.experts.run(h, weights, idx)
        if self.routed_expert_norm is not None:
            y = rms_norm(y, self.routed_expert_norm, self.cfg.rms_norm_eps)
        if self.routed_expert_up_proj is not None:
            y = linear(y, self.routed_expert_up_proj)
        if self.shared_experts is not None:
            y = y + self.shared_experts.run(x)
        return y

    def tensors(self, prefix: str) -> list[TensorSpec]:
        names = ("w1", "w3", "w2") if self.cfg.family == "kimi_linear" else ("gate_proj", "up_proj", "down_proj")
        out = self.gate.tensors(f"{prefix}gate.") + self.experts.tensors(f"{prefix}experts.", names)
        for name in ("routed_expert_down_proj", "routed_expert_up_proj", "routed_expert_norm"):
            p = getattr(self, name)
            if p is not None:
                out.append(spec(f"{prefix}{name}.weight", p))
        if self.shared_experts is not None:
            out += self.shared_experts.tensors(f"{prefix}shared_experts.")
        return out
