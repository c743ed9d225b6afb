"""The cyclic collector is paused inside a simulation and restored, whatever happens, after it."""

from __future__ import annotations

import gc

import pytest

from tokenmill.sim.gc_pause import cyclic_gc_paused


def test_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_error() -> None:
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_as_a_decorator() -> None:
    @cyclic_gc_paused()
    def inside() -> bool:
        return gc.isenabled()

    assert inside() is False
    assert gc.isenabled()
