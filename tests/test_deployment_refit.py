"""benchmarks/deployment_refit.py: which rows make a deployment, which of them a user measures first,
and that a measured point is never scored as a prediction."""

from __future__ import annotations

from tests.cli_helpers import load_benchmark
from tests.perf.rows import MODELS, row

dr = load_benchmark("deployment_refit")


def lanes_row(rid: str, isl: int, osl: int, lanes: int, **kw: str) -> dict[str, str]:
    cells = {"silicon_data_source": f"s; silicon_concurrency={lanes}", **kw}
    return row(id=rid, isl=str(isl), osl=str(osl), **cells)


def test_rows_of_one_engine_release_model_gpu_and_layout_are_one_deployment() -> None:
    rows = [lanes_row(f"a{c}", 1024, 128, c) for c in (1, 2, 4)]
    rows += [lanes_row("tp2", 1024, 128, 4, tp_size="2"), lanes_row("v2", 1024, 128, 4, backend_version="0.2")]
    rows += [lanes_row("nomeas", 1024, 128, 8, silicon_ttft_ms="")]
    groups = dr.deployments(rows, min_rows=1)
    assert sorted(len(g) for g in groups.values()) == [1, 1, 3]
    assert dr.deployments(rows, min_rows=2) == {k: v for k, v in groups.items() if len(v) == 3}


def test_the_measured_points_are_the_commonest_lengths_at_lowest_middle_and_highest_lanes() -> None:
    group = [lanes_row(f"s{c}", 1024, 1024, c) for c in (1, 2, 4, 8, 16, 32, 64)]
    group += [lanes_row(f"l{c}", 8192, 1024, c) for c in (4, 64)]
    picked = dr.measured_points(group, 3)
    assert [r["id"] for r in picked] == ["s1", "s8", "s64"]
    assert [r["id"] for r in dr.measured_points(group, 2)] == ["s1", "s64"]
    assert [r["id"] for r in dr.measured_points(group[:2], 3)] == ["s1", "s2"]
    assert [r["id"] for r in dr.measured_points(group, 2, shapes=2)] == ["s1", "s64", "l4", "l64"]


def test_a_deployment_is_scored_only_on_points_it_was_not_fitted_on() -> None:
    group = [lanes_row(f"s{c}", 512, 64, c, silicon_tpot_ms="6.5") for c in (1, 4, 16)]
    group += [lanes_row("again", 512, 64, 16, silicon_data_source="other file; silicon_concurrency=16")]
    group += [lanes_row("long", 2048, 64, 4)]
    fixed = tuple(k for k in (*dr.GPU_FIELDS, *dr.GLOBAL_FIELDS))
    key = tuple(group[0].get(k, "") for k in dr.DEPLOYMENT)
    out = dr.one((key, group, 2, str(MODELS), fixed, 1, 0.0, 1, 2, None))  # one round of two sweeps
    assert out["fit"] == ["s1", "s16"]
    scored = {r["id"]: r for r in out["rows"]}
    assert set(scored) == {"s4", "long"}  # "again" repeats the measured s16
    assert scored["s4"]["same_lengths"] and not scored["long"]["same_lengths"]
    assert all(r[k] is not None for r in scored.values() for k in ("ttft_before", "ttft_after"))
