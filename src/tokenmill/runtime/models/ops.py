"""Elementwise and normalisation ops, written to round exactly where transformers rounds.

Parity with the reference implementations in fp32 is the test of correctness; in bf16 the same
cast points keep the drift small. Each function says which reference it mirrors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF ``*RMSNorm``: normalise in fp32, cast back to the input dtype, then scale by the weight."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def gated_rms_norm(x: torch.Tensor, weight: torch.Tensor, gate: torch.Tensor, eps: float) -> torch.Tensor:
    """KDA output norm (``FusedRMSNormGated``, sigmoid): all in fp32, weight included, then cast."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight.float() * h * torch.sigmoid(gate.float())
    return h.to(dtype)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fla's l2norm: x / sqrt(sum x² + eps) (eps inside the root, not a clamp like F.normalize)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def softplus20(x: torch.Tensor) -> torch.Tensor:
    """Softplus with transformers' explicit threshold at 20 (identity above it)."""
    return torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(x)))


def situ(gate: torch.Tensor, beta: float) -> torch.Tensor:
    """SiTU: a SiLU whose linear factor is soft-capped, β·tanh(x/β)·sigmoid(x) (K3, §3.3)."""
    return beta * torch.tanh(gate / beta) * torch.sigmoid(gate)


def glu(gate: torch.Tensor, up: torch.Tensor, act: str, beta: float, linear_beta: float) -> torch.Tensor:
    """The gated activation of every MLP: SiLU-GLU, or K3's SiTU-GLU with its capped up branch."""
    if act == "situ":
        return situ(gate, beta) * (linear_beta * torch.tanh(up / linear_beta))
    return F.silu(gate) * up


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` under a name the modules share; the weight is [out, in] as on disk."""
    return F.linear(x, weight, bias)
