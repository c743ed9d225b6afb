"""The fast paths against their slow definitions: factorised intra-chunk KDA products (and their
explicit fallback), the batched chunked KDA against the token-by-token recurrence, and both MLA
prefill forms against transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.runtime.models.engine import TinyEngine  # noqa: E402
from tokenmill.runtime.models import kda, mla  # noqa: E402

TOL = 1e-4


def rel_err(ours: Any, ref: Any) -> float:
    return float((ours.double() - ref.double()).abs().max() / ref.double().abs().max())


def gates(shape: tuple[int, ...], scale: float, seed: int) -> Any:
    """Per-token log-decays ≤ 0, as Kimi's −e^A·softplus(·) makes them; ``scale`` sets how fast."""
    g = torch.Generator().manual_seed(seed)
    return -scale * torch.nn.functional.softplus(torch.randn(shape, generator=g) - 2)


def unit(shape: tuple[int, ...], seed: int) -> Any:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("scale", [0.5, 6.0, 10.0, 40.0], ids=["block-64", "block-32", "block-16", "explicit"])
def test_intra_chunk_matches_explicit(scale: float) -> None:
    """Each decay regime takes a different path (the widest block whose span is within the limit;
    at 40 all but the undecayed chunk exceed it even in 16-blocks and fall back to the explicit
    form); all equal the explicit C×C×dk form computed in float64."""
    M, C, dk = 6, 64, 32
    k, q = unit((M, C, dk), 1), unit((M, C, dk), 2)
    G = gates((M, C, dk), scale, 3)
    G[0] = 0.0  # a padded chunk (g = 0) next to decaying ones
    G = G.cumsum(dim=1)
    ours = kda.intra_chunk([q, k], k, G)
    for x, A in zip((q, k), ours, strict=True):
        ref = kda._intra_explicit(x.double(), k.double(), G.double())
        assert torch.isfinite(A).all()
        assert rel_err(A, ref) < 1e-5


def recurrence(q: Any, k: Any, v: Any, g: Any, beta: Any, S: Any) -> tuple[Any, Any]:
    """The delta rule token by token (transformers' ``recurrent_kimi_delta_attention``), float64.
    Inputs [B, H, T, d] (beta [B, H, T]), S [B, H, dk, dv]."""
    q, k, v, g, beta, S = (t.double() for t in (q, k, v, g, beta, S))
    out = torch.zeros_like(v)
    for t in range(q.shape[2]):
        S = S * g[:, :, t, :, None].exp()
        delta = (v[:, :, t] - (S * k[:, :, t, :, None]).sum(-2)) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = (S * q[:, :, t, :, None]).sum(-2)
    return out, S


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0], ids=["mild", "medium", "steep"])
def test_chunk_kda_matches_recurrence(scale: float) -> None:
    B, H, N, C, d = 2, 2, 3, 64, 16
    shape = (B, H, N, C, d)
    q = unit(shape, 1) * d**-0.5
    k = unit(shape, 2)
    v = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    g = gates(shape, scale, 4)
    g[0, 0, 1] *= 0.01  # chunks with very different decays in one batch
    beta = torch.rand((B, H, N, C), generator=torch.Generator().manual_seed(5))
    S0 = torch.randn((B, H, d, d), generator=torch.Generator().manual_seed(6)) * 0.1
    out, states = kda.chunk_kda(q, k, v, g, beta, S0)
    fq, fk, fv, fg, fb = (t.reshape(B, H, N * C, *t.shape[4:]) for t in (q, k, v, g, beta))
    ref_out, ref_S = recurrence(fq, fk, fv, fg, fb, S0)
    assert rel_err(out.reshape(B, H, N * C, d), ref_out) < TOL
    assert rel_err(states[:, :, -1], ref_S) < TOL
    torch.testing.assert_close(states[:, :, 0], S0)
    head = 2 * C  # the first two chunks alone: the state handed from chunk to chunk is exact
    mid, _ = recurrence(fq[:, :, :head], fk[:, :, :head], fv[:, :, :head], fg[:, :, :head], fb[:, :, :head], S0)
    assert rel_err(out.reshape(B, H, N * C, d)[:, :, :head], mid) < TOL


@pytest.mark.parametrize("form", ["expanded", "absorbed-sdpa", "absorbed-bmm"])
def test_mla_prefill_forms_match_transformers(
    deepseek_ckpt: tuple[Path, Any], form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both MLA prefill forms (and both kernels of the absorbed one), forced, on a chunked prefill
    (so the second chunk attends to cached context) plus decode, against transformers."""
    from tokenmill.runtime.models import load_model

    path, hf = deepseek_ckpt
    monkeypatch.setattr(mla, "FORCE_FORM", form.split("-")[0])
    monkeypatch.setattr(mla, "EXPLICIT_SCORES", 0 if form == "absorbed-sdpa" else 1 << 30)
    ids = torch.randint(0, 256, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    eng = TinyEngine(load_model(path))
    seq = eng.new_seq()
    first = eng.step([(seq, ids[:100], {})], all_logits=True)
    second = eng.step([(seq, ids[100:149], {})], all_logits=True)
    last = eng.step([(seq, ids[149:], {})], all_logits=True)
    assert rel_err(torch.cat([first, second, last]), ref) < TOL
