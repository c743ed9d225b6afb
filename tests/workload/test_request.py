"""RequestSpec, Workload and content ids: the invariants every consumer relies on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.workload.request import (
    RequestSpec,
    Workload,
    content_block_id,
    content_block_ids,
    sort_sessions,
)


def test_block_ids_are_pinned_across_processes() -> None:
    # A change here silently invalidates every saved workload's prefix structure.
    assert content_block_id("abc", 0) == 141485083800462821
    assert content_block_ids("abc", 3 * 64 + 10, 64)[:3] == (
        141485083800462821,
        3586688693461575653,
        1143290610956681642,
    )


@settings(max_examples=60, deadline=None)
@given(
    key=st.text(max_size=30),
    n1=st.integers(0, 5_000),
    extra=st.integers(0, 5_000),
    block=st.integers(1, 256),
)
def test_block_ids_prefix_property(key: str, n1: int, extra: int, block: int) -> None:
    short = content_block_ids(key, n1, block)
    long = content_block_ids(key, n1 + extra, block)
    assert len(short) == n1 // block
    assert long[: len(short)] == short
    assert all(0 <= b < 2**63 for b in long)
    assert all(content_block_id(key, i) == b for i, b in enumerate(long[:5]))


@settings(max_examples=30, deadline=None)
@given(a=st.text(max_size=12), b=st.text(max_size=12))
def test_distinct_streams_share_no_block(a: str, b: str) -> None:
    if a == b:
        return
    assert not set(content_block_ids(a, 64 * 50, 64)) & set(content_block_ids(b, 64 * 50, 64))


def test_block_id_arguments_are_checked() -> None:
    with pytest.raises(TokenmillError, match="block_tokens"):
        content_block_ids("k", 10, 0)
    with pytest.raises(TokenmillError, match="n_tokens"):
        content_block_ids("k", -1, 64)
    with pytest.raises(TokenmillError, match="index"):
        content_block_id("k", -1)


def test_request_spec_validation() -> None:
    with pytest.raises(TokenmillError, match="prompt_tokens"):
        RequestSpec("r", -1, 10, 0.0)
    with pytest.raises(TokenmillError, match="output_tokens"):
        RequestSpec("r", 1, True, 0.0)  # bool is not a token count
    with pytest.raises(TokenmillError, match="arrival_s"):
        RequestSpec("r", 1, 1, float("nan"))
    with pytest.raises(TokenmillError, match="request_id"):
        RequestSpec("", 1, 1, 0.0)
    with pytest.raises(TokenmillError, match="think_time_s"):
        RequestSpec("r", 1, 1, 0.0, think_time_s=-1.0)
    assert RequestSpec("r", 100, 20).total_tokens == 120


def _turn(sid: str, k: int, arrival: float | None = None) -> RequestSpec:
    return RequestSpec(f"{sid}/{k}", 128, 8, arrival, session_id=sid, turn=k)


def test_workload_rules() -> None:
    w = Workload("w", (_turn("a", 0, 0.0), _turn("a", 1), _turn("b", 0, 1.0), RequestSpec("c", 5, 5, 2.0)))
    assert list(w.sessions()) == ["a", "b"]
    assert [r.turn for r in w.sessions()["a"]] == [0, 1]
    assert w.total_prompt_tokens == 128 * 3 + 5 and w.total_output_tokens == 8 * 3 + 5
    assert len(w) == 4 and not w.closed_loop
    with pytest.raises(TokenmillError, match="appears twice"):
        Workload("w", (RequestSpec("x", 1, 1, 0.0), RequestSpec("x", 1, 1, 0.0)))
    with pytest.raises(TokenmillError, match="full blocks"):
        Workload("w", (RequestSpec("x", 100, 1, 0.0, block_ids=(1, 2)),))
    with pytest.raises(TokenmillError, match="open loop"):
        Workload("w", (RequestSpec("x", 1, 1),))
    with pytest.raises(TokenmillError, match="later turn"):
        Workload("w", (_turn("a", 0, 0.0), _turn("a", 1, 3.0)))
    with pytest.raises(TokenmillError, match="turns must increase"):
        Workload("w", (_turn("a", 1, 0.0), _turn("a", 0)))
    with pytest.raises(TokenmillError, match="order requests by arrival"):
        Workload("w", (RequestSpec("x", 1, 1, 2.0), RequestSpec("y", 1, 1, 1.0)))
    with pytest.raises(TokenmillError, match="concurrency"):
        Workload("w", (), concurrency=0)
    closed = Workload("w", (RequestSpec("x", 1, 1),), concurrency=4)
    assert closed.closed_loop


def test_shared_prefix_blocks_and_sorting() -> None:
    ids = content_block_ids("s", 64 * 4, 64)
    a = RequestSpec("a", 256, 1, 0.0, block_ids=ids[:2])
    b = RequestSpec("b", 256, 1, 1.0, block_ids=ids)
    assert Workload("w", (a, b)).shared_prefix_blocks() == 2
    shuffled = [_turn("late", 1), RequestSpec("solo", 1, 1, 0.5), _turn("late", 0, 2.0), _turn("early", 0, 0.0)]
    assert [r.request_id for r in sort_sessions(shuffled)] == ["early/0", "solo", "late/0", "late/1"]
