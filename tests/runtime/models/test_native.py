"""The C kernels of ``native`` against references: MLA decode against a float64 absorbed-attention
reference, the MoE experts against the per-expert loop, and the engine's decode with and without
each (the MoE's grouped matmul against its loop, too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.runtime.models.engine import TinyEngine  # noqa: E402
from tokenmill.runtime.models import mla, moe, native  # noqa: E402

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler (the torch path is used)")


def reference(flat: Any, cells: Any, lens: Any, q_nope: Any, q_pe: Any, w_kv: Any, scale: float) -> Any:
    """Gather, absorb W_UK, softmax over each sequence's context, absorb W_UV: float64, per sequence."""
    H, P = q_nope.shape[1], q_nope.shape[2]
    C = w_kv.shape[2]
    out = []
    for b in range(len(lens)):
        rows = flat[cells[b, : lens[b]]].double()  # [L, C + R]
        q = torch.cat([torch.einsum("hp,hpc->hc", q_nope[b].double(), w_kv[:, :P].double()), q_pe[b].double()], -1)
        probs = torch.softmax(q @ rows.T * scale, dim=-1)  # [H, L]
        o_lat = probs @ rows[:, :C]
        out.append(torch.einsum("hc,hvc->hv", o_lat, w_kv[:, P:].double()))
    return torch.stack(out).view(len(lens), H, -1)


@needs_native
@pytest.mark.parametrize(
    "B, H, C, R, P, V",
    [
        (7, 4, 512, 64, 64, 64),  # DeepSeek-like widths; B not a multiple of 4 (the tail paths)
        (5, 6, 96, 32, 48, 40),  # heads not a multiple of 4, columns not a multiple of 64
        (3, 1, 40, 8, 16, 24),  # one head, widths below one vector
        (1, 8, 64, 32, 32, 32),  # Kimi-like narrow latent
    ],
)
def test_kernel_matches_reference(B: int, H: int, C: int, R: int, P: int, V: int) -> None:
    g = torch.Generator().manual_seed(B * 100 + H)
    page, pages = 16, 40
    W = C + R
    flat = torch.randn(pages * page, W, generator=g)
    lens = torch.tensor([1, 2, 17, 33, 50, 64, 9][:B], dtype=torch.int64)
    lmax = int(lens.max()) + 3  # padded cell rows, as in a decode group
    perm = torch.randperm(pages, generator=g)
    pos = torch.arange(lmax)
    tables = perm[: B * 5].view(B, 5)  # scattered pages, like a shared pool
    cells = (tables[:, pos // page] * page + pos % page).contiguous()
    q_nope, q_pe = torch.randn(B, H, P, generator=g), torch.randn(B, H, R, generator=g)
    w_kv = torch.randn(H, P + V, C, generator=g) * 0.1
    ws = torch.empty(H * lmax + B * H * (W + C))
    ours = native.mla_decode(flat, cells, lens, q_nope, q_pe, w_kv, 0.3, ws)
    ref = reference(flat, cells, lens, q_nope, q_pe, w_kv, 0.3)
    assert ours.shape == (B, H, V)
    torch.testing.assert_close(ours.double(), ref, rtol=1e-5, atol=1e-5)


@needs_native
def test_kernel_rejects_bad_indices() -> None:
    flat = torch.randn(32, 72)
    q_nope, q_pe, w_kv = torch.randn(1, 4, 16), torch.randn(1, 4, 8), torch.randn(4, 32, 64)
    ws = torch.empty(4096)
    with pytest.raises(IndexError):
        native.mla_decode(flat, torch.tensor([[0, 40]]), torch.tensor([2]), q_nope, q_pe, w_kv, 1.0, ws)
    with pytest.raises(IndexError):
        native.mla_decode(flat, torch.tensor([[0, 1]]), torch.tensor([3]), q_nope, q_pe, w_kv, 1.0, ws)
    with pytest.raises(ValueError):
        native.mla_decode(flat.double(), torch.tensor([[0, 1]]), torch.tensor([2]), q_nope, q_pe, w_kv, 1.0, ws)


def mla_layers(path: Path) -> list[int]:
    from tokenmill.runtime.models import load_model

    return load_model(path).kv_layers


def decode_run(path: Path, prompts: list[list[int]], steps: int) -> tuple[Any, list[list[int]]]:
    """Prefill ``prompts`` (one step), then ``steps`` batched greedy decode steps: stacked logits, tokens."""
    from tokenmill.runtime.models import load_model

    eng = TinyEngine(load_model(path), num_pages=256)
    seqs = [eng.new_seq() for _ in prompts]
    logits = eng.step([(s, p, {}) for s, p in zip(seqs, prompts, strict=True)])
    history, tokens = [logits], [[int(t)] for t in logits.argmax(-1)]
    for _ in range(steps):
        logits = eng.step([(s, [tok[-1]], {}) for s, tok in zip(seqs, tokens, strict=True)])
        history.append(logits)
        for tok, t in zip(tokens, logits.argmax(-1), strict=True):
            tok.append(int(t))
    return torch.cat(history), tokens


@needs_native
def test_engine_decode_native_equals_torch(deepseek_ckpt: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Batched decode of sequences of different lengths: native kernel vs the torch bmm path."""
    path, _ = deepseek_ckpt
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 40, 17, 64, 1)]
    assert torch.get_num_threads() == 1  # the conftest's setting: the kernel's condition
    monkeypatch.setattr(mla, "NATIVE_DECODE", False)
    ref_logits, ref_tokens = decode_run(path, prompts, 12)
    monkeypatch.setattr(mla, "NATIVE_DECODE", True)
    calls = []
    kernel = native.mla_decode
    monkeypatch.setattr(native, "mla_decode", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    logits, tokens = decode_run(path, prompts, 12)
    # every decode step of every MLA layer took it, and so did the one-token prompt in the first step
    assert len(calls) == 13 * len(mla_layers(path))
    assert tokens == ref_tokens
    assert float((logits - ref_logits).abs().max() / ref_logits.abs().max()) < 1e-5


@pytest.mark.skipif(not moe.GROUPED_MM, reason="torch without grouped_mm")
def test_moe_grouped_equals_loop(deepseek_ckpt: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = deepseek_ckpt
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (30, 7, 52)]
    monkeypatch.setattr(moe, "NATIVE_DECODE", False)  # the torch paths only
    monkeypatch.setattr(moe, "GROUPED_MM", False)
    ref_logits, ref_tokens = decode_run(path, prompts, 4)
    monkeypatch.setattr(moe, "GROUPED_MM", True)
    logits, tokens = decode_run(path, prompts, 4)
    assert tokens == ref_tokens
    assert float((logits - ref_logits).abs().max() / ref_logits.abs().max()) < 1e-5


def test_page_ids_outside_the_pool_raise(deepseek_ckpt: tuple[Path, Any]) -> None:
    """build_context checks page ids once per step (the decode kernel reads the pool unchecked)."""
    from tokenmill.errors import TokenmillError
    from tokenmill.runtime.models import SeqSlice, load_model

    path, _ = deepseek_ckpt
    eng = TinyEngine(load_model(path), num_pages=8)
    bad = SeqSlice(token_ids=torch.tensor([1]), start=0, page_table=torch.tensor([8]), state_slot=0)
    with pytest.raises(TokenmillError, match="page ids"), torch.inference_mode():
        eng.model.forward_slices([bad], eng.pools)


@needs_native
@pytest.mark.parametrize("counts", [[0, 3, 1, 0, 6], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [9, 0, 0, 2, 0]])
def test_moe_kernel_matches_loop(counts: list[int]) -> None:
    """The C experts against the per-expert torch loop (SiLU-GLU), every tail of the 4/2/1-row blocks."""
    g = torch.Generator().manual_seed(sum(counts))
    E, D, inter = len(counts), 72, 40  # widths not multiples of the 16-float vectors
    w13, w2 = torch.randn(E, 2 * inter, D, generator=g) * 0.1, torch.randn(E, D, inter, generator=g) * 0.1
    xs = torch.randn(sum(counts), D, generator=g)
    ours = native.moe_experts(xs, torch.tensor(counts), w13, w2)
    ref, start = torch.empty_like(xs), 0
    for e, n in enumerate(counts):
        gate, up = (xs[start : start + n] @ w13[e].T).chunk(2, dim=-1)
        ref[start : start + n] = (torch.nn.functional.silu(gate) * up) @ w2[e].T
        start += n
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        native.moe_experts(xs, torch.tensor([*counts[:-1], counts[-1] + 1]), w13, w2)


@needs_native
def test_engine_moe_native_equals_grouped(deepseek_ckpt: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = deepseek_ckpt
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (3, 33, 12)]
    monkeypatch.setattr(moe, "NATIVE_DECODE", False)
    ref_logits, ref_tokens = decode_run(path, prompts, 6)
    monkeypatch.setattr(moe, "NATIVE_DECODE", True)
    calls = []
    kernel = native.moe_experts
    monkeypatch.setattr(native, "moe_experts", lambda *a: calls.append(1) or kernel(*a))
    logits, tokens = decode_run(path, prompts, 6)
    assert calls  # every step here is decode-sized
    assert tokens == ref_tokens
    assert float((logits - ref_logits).abs().max() / ref_logits.abs().max()) < 1e-5
