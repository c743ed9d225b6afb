"""K3's Block Attention Residuals (reference §3.4): a learned softmax over residual snapshots.

Instead of one running residual stream, each token keeps a bank of snapshots: r_0 is the
embedding, and every ``attn_res_block_size`` layers the running sum of sub-layer outputs of the
block just finished is pushed. Each sub-layer (attention, then MLP) reads its input as

    h = Σ_j softmax_j(w_resᵀ · RMSNorm(row_j)) · row_j,   rows = [bank…, running sum]

with its own ``*_res_proj`` (D→1) and ``*_res_norm`` weights, and adds its output to the running
sum. Two readings the description leaves open, and the choices made here:

* right after a push the running sum is empty; it is then not a row (so the first layer of a
  block mixes the bank alone), which is the same as mixing before the push;
* the final norm sees the plain residual sum (all snapshots plus the running sum), i.e. what the
  stream would hold without the mixing; no extra mixing weights are read for the output.
"""

from __future__ import annotations

import torch

from tokenmill.runtime.models.ops import linear, rms_norm


def mix_rows(rows: list[torch.Tensor], proj: torch.Tensor, norm: torch.Tensor, eps: float) -> torch.Tensor:
    """rows: n tensors [T, D]; proj [1, D]; norm [D] → [T, D] softmax-weighted sum of the rows."""
    stacked = torch.stack(rows)  # [n, T, D]
    scores = linear(rms_norm(stacked, norm, eps), proj)[..., 0].float()  # [n, T]
    weights = torch.softmax(scores, dim=0).to(stacked.dtype)
    return (weights[..., None] * stacked).sum(0)
