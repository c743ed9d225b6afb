"""Parity with transformers, and the cache contract: chunking, prefix hits, mixed steps.

Relative error is ``max|ours − ref| / max|ref|`` over the whole logits tensor (max-norm of the
difference over the max-norm of the reference), in fp32.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from tests.runtime.models.checkpoints import VOCAB  # noqa: E402
from tests.runtime.models.engine import Seq, TinyEngine  # noqa: E402
from tokenmill.runtime.models import CachePools, load_model  # noqa: E402

PROMPT = 300
GEN = 64
TOL = 1e-4


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def rel_err(ours: Any, ref: Any) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module", params=["kimi_linear", "deepseek_v3"])
def family(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """(our model, transformers' model) for each family."""
    fixture = "kimi_ckpt" if request.param == "kimi_linear" else "deepseek_ckpt"
    path, hf = request.getfixturevalue(fixture)
    return load_model(path), hf


def test_deepseek_checkpoint_is_sharded(deepseek_ckpt: tuple[Path, Any]) -> None:
    path, _ = deepseek_ckpt
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("model-*.safetensors"))) > 1


def test_prompt_logits_match_transformers(family: tuple[Any, Any]) -> None:
    model, hf = family
    ids = prompt(PROMPT, seed=1)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    eng = TinyEngine(model)
    ours = eng.step([(eng.new_seq(), ids, {})], all_logits=True)
    last = TinyEngine(model).generate(ids, 1)[1][0]
    assert ours.shape == ref.shape and ours.dtype == torch.float32
    assert rel_err(ours, ref) < TOL
    torch.testing.assert_close(last, ours[-1])


def test_greedy_generation_matches_transformers(family: tuple[Any, Any]) -> None:
    model, hf = family
    ids = prompt(PROMPT, seed=1)
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=GEN, do_sample=False)[0, PROMPT:].tolist()
    ours, _ = TinyEngine(model).generate(ids, GEN)
    assert len(ref) == GEN
    assert ours == ref


@pytest.mark.parametrize("chunk", [64, 100])
def test_chunked_prefill_then_decode_equals_one_shot(family: tuple[Any, Any], chunk: int) -> None:
    model, _ = family
    ids = prompt(PROMPT, seed=2)
    one_tokens, one_logits = TinyEngine(model).generate(ids, 32)
    tokens, logits = TinyEngine(model).generate(ids, 32, chunk=chunk)
    assert tokens == one_tokens
    for a, b in zip(logits, one_logits, strict=True):
        assert rel_err(a, b) < TOL


@pytest.mark.parametrize(
    ("chunks", "boundary"),
    [((100, 200, 300), 128), ((300,), 256)],
    ids=["checkpoint-inside-chunk-2", "checkpoint-inside-one-shot"],
)
def test_prefix_hit_restoring_checkpoint_equals_cold_run(
    family: tuple[Any, Any], chunks: tuple[int, ...], boundary: int
) -> None:
    """Request A saves its state at a block boundary; B shares A's pages up to it and restores it."""
    model, _ = family
    eng = TinyEngine(model, page_size=16)
    first = prompt(PROMPT, seed=3)
    a = eng.new_seq()
    ckpt = eng.take_slot()
    lo = 0
    for hi in chunks:
        kw: dict[str, object] = {"checkpoint_at": boundary, "checkpoint_slot": ckpt} if lo < boundary <= hi else {}
        eng.step([(a, first[lo:hi], kw)])
        lo = hi
    second = first[:boundary] + prompt(150, seed=4)
    b = eng.new_seq(shared_pages=a.pages[: boundary // 16], cached=boundary)
    logits = eng.step([(b, second[boundary:], {"restore_slot": ckpt})])[0]
    hit_tokens, hit_logits = eng.greedy(b, logits, 32)
    cold_tokens, cold_logits = TinyEngine(model).generate(second, 32)
    assert hit_tokens == cold_tokens
    for x, y in zip(hit_logits, cold_logits, strict=True):
        assert rel_err(x, y) < TOL


def _fork(eng: TinyEngine) -> TinyEngine:
    twin = copy.copy(eng)
    p = eng.pools
    twin.pools = CachePools(*(None if t is None else t.clone() for t in (p.kv, p.ssm, p.conv)), p.page_size)
    twin.free_pages, twin.free_slots = list(eng.free_pages), list(eng.free_slots)
    return twin


def test_mixed_step_equals_separate_steps(family: tuple[Any, Any]) -> None:
    """One sequence prefilling while two decode (different context lengths) in one step."""
    model, _ = family
    eng = TinyEngine(model)
    s1, s2 = eng.new_seq(), eng.new_seq()
    t1 = int(eng.prefill(s1, prompt(40, seed=5)).argmax())
    t2 = int(eng.prefill(s2, prompt(75, seed=6)).argmax())
    ck = eng.take_slot()
    third = prompt(90, seed=7)
    twin = _fork(eng)
    u1 = replace(s1, tokens=list(s1.tokens), pages=list(s1.pages))
    u2 = replace(s2, tokens=list(s2.tokens), pages=list(s2.pages))

    save: dict[str, object] = {"checkpoint_at": 41, "checkpoint_slot": ck}
    s3 = eng.new_seq()
    mixed = eng.step([(s3, third, {}), (s1, [t1], save), (s2, [t2], {})])

    u3 = twin.new_seq()
    alone = torch.cat([twin.step([(u3, third, {})]), twin.step([(u1, [t1], save)]), twin.step([(u2, [t2], {})])])
    assert rel_err(mixed, alone) < TOL
    for a, b in zip(
        (eng.pools.kv, eng.pools.ssm, eng.pools.conv), (twin.pools.kv, twin.pools.ssm, twin.pools.conv), strict=True
    ):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if eng.pools.ssm is not None:  # the decode checkpoint is the state after that token
        assert eng.pools.conv is not None
        torch.testing.assert_close(eng.pools.ssm[:, ck], eng.pools.ssm[:, s1.slot])
        torch.testing.assert_close(eng.pools.conv[:, ck], eng.pools.conv[:, s1.slot])


def test_random_schedules_equal_one_shot(family: tuple[Any, Any]) -> None:
    """Random chunk sizes (1-token chunks take the decode path mid-prompt), random batching of the
    sequences, and checkpoints at random positions; every token's logits equal a one-shot prefill's,
    and each checkpoint, restored into a fresh sequence, continues like the original."""
    model, _ = family
    rng = torch.Generator().manual_seed(11)

    def pick(options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=rng))]

    prompts = [prompt(n, seed=20 + i) for i, n in enumerate((150, 97, 64, 23))]
    eng = TinyEngine(model, num_pages=256, num_slots=48)
    seqs = [eng.new_seq() for _ in prompts]
    fork_slot = eng.take_slot()
    got: list[list[Any]] = [[] for _ in prompts]
    saved: list[tuple[int, int, int]] = []  # (sequence, position, slot)
    while any(s.cached < len(p) for s, p in zip(seqs, prompts, strict=True)):
        work, owners = [], []
        for i, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
            if s.cached == len(p) or pick([0, 1, 1]) == 0:
                continue
            n = min(len(p) - s.cached, pick([1, 1, 2, 5, 31, 64, 65, 100]))
            kw: dict[str, object] = {}
            if pick([0, 1]):
                at, slot = s.cached + pick(list(range(1, n + 1))), eng.take_slot()
                kw = {"checkpoint_at": at, "checkpoint_slot": slot}
                saved.append((i, at, slot))
            work.append((s, p[s.cached : s.cached + n], kw))
            owners.append(i)
        if not work:
            continue
        slices = [eng._slice(s, new, **kw) for s, new, kw in work]
        with torch.inference_mode():
            out = model.forward_slices(slices, eng.pools, all_logits=True)
        lo = 0
        for (s, new, _), i in zip(work, owners, strict=True):
            got[i].append(out[lo : lo + len(new)])
            lo += len(new)
            s.cached += len(new)
    assert len(saved) >= 4
    for i, p in enumerate(prompts):
        ref_eng = TinyEngine(model)
        ref = ref_eng.step([(ref_eng.new_seq(), p, {})], all_logits=True)
        assert rel_err(torch.cat(got[i]), ref) < TOL
        for _, at, slot in (x for x in saved if x[0] == i and x[1] < len(p)):
            # The fork shares all the pages; it rewrites positions >= at with the same tokens' latents.
            fork = Seq(slot=fork_slot, pages=list(seqs[i].pages), cached=at)
            rest = eng.step([(fork, p[at:], {"restore_slot": slot})], all_logits=True)
            assert rel_err(rest, ref[at:]) < TOL, at
