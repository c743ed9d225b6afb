"""Engine constants per engine version: the table, how a (GPU, engine, version) reads it, and the fit."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import pytest

from tests.perf.rows import fastest_kernel, row
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrate import MIN_VERSION_ROWS, fit
from tokenmill.perf.calibrated import ParamTable, version_key
from tokenmill.perf.params import PerfParams
from tokenmill.perf.row_prediction import predict_rows
from tokenmill.perf.scoring import score

MODELS = Path(str(resources.files("tokenmill.spec") / "presets"))


def _table() -> ParamTable:
    return ParamTable(
        global_={"step_overhead_s": 1e-3},
        gpus={"h100": {"matmul_efficiency": 0.7}},
        backends={"vllm": {"overhead_scale": 2.0, "request_latency_s": 0.02}},
        versions={"vllm@0.19.0": {"overhead_scale": 1.5}},
    )


def test_a_version_refines_its_engine_and_round_trips() -> None:
    table = ParamTable.from_json(_table().to_json())
    assert table.versions == {"vllm@0.19.0": {"overhead_scale": 1.5}}
    p, notes = table.resolve("h100", "vllm", "0.19.0")
    assert p.overhead_scale == 1.5 and p.request_latency_s == 0.02  # the engine's where the version is silent
    assert not any("0.19.0" in n for n in notes)
    q, notes = table.resolve("h100", "vllm", "0.12.0")
    assert q.overhead_scale == 2.0 and any("0.12.0" in n and "engine's" in n for n in notes)
    r, _ = table.resolve("h100", "vllm")
    assert r.overhead_scale == 2.0
    assert version_key(" VLLM ", " 0.19.0 ") == "vllm@0.19.0"


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({"vllm": {"overhead_scale": 1.5}}, "ENGINE@VERSION"),
        ({"vllm@1": {"matmul_efficiency": 0.5}}, "only engine constants"),
        ({"vllm@1": {"overhead_scale": -1}}, "versions.vllm@1.overhead_scale"),
    ],
)
def test_bad_version_tables_are_refused(versions: dict[str, dict[str, float]], message: str) -> None:
    data = _table().to_json() | {"versions": versions}
    with pytest.raises(TokenmillError, match=message):
        ParamTable.from_json(data)


def _rows(version: str, slow: float, n: int) -> list[dict[str, str]]:
    """``n`` Llama-3.1-8B points on one H100 under vLLM ``version``, with a made-up smooth response
    (TTFT 25 ms + 0.04 ms per prompt token × √C, TPOT 6 ms + 0.08 ms × C) times ``slow``."""
    out = []
    grid = [(c, isl) for isl in (512, 1024, 2048, 4096) for c in (1, 2, 4, 8, 16)]
    for c, isl in grid[:n]:
        ttft = (25.0 + 0.04 * isl * math.sqrt(c)) * slow
        tpot = (6.0 + 0.08 * c) * slow
        out.append(
            row(
                id=f"{version}-{c}-{isl}",
                backend_version=version,
                isl=str(isl),
                osl="64",
                silicon_data_source=f"s; silicon_concurrency={c}",
                silicon_ttft_ms=f"{ttft:.3f}",
                silicon_tpot_ms=f"{tpot:.3f}",
            )
        )
    return out


def test_the_fit_gives_a_version_with_rows_enough_its_own_constants() -> None:
    assert MIN_VERSION_ROWS == 20
    fast, slow = _rows("1.0", 1.0, 20), _rows("2.0", 1.5, 20)
    few = _rows("3.0", 1.0, 5)  # under MIN_VERSION_ROWS: the engine's constants
    plain, _, none = fit(fast + slow + few, MODELS, ParamTable(), rounds=1, sweeps=1)
    assert none.versions == [] and plain.versions == {}  # off unless asked for
    table, _, data = fit(fast + slow + few, MODELS, ParamTable(), rounds=1, sweeps=2, versions=True)
    assert data.versions == ["vllm@1.0", "vllm@2.0"]
    assert set(table.versions) == {"vllm@1.0", "vllm@2.0"}
    assert "loss_after_versions" in table.meta and table.meta["loss_after_versions"] < table.meta["loss_after"]
    preds = {p.id: p for p in predict_rows(fast + slow + few, MODELS, table)}
    ratios = [
        (preds[b["id"]].tpot_ms or 0.0) / (preds[a["id"]].tpot_ms or 1.0) for a, b in zip(fast, slow, strict=True)
    ]
    ratios.sort()
    # the made-up releases differ by 1.5× at every point; a version's constants are pulled towards
    # the engine's, so the fitted ratio lands a little inside it
    assert 1.25 <= ratios[len(ratios) // 2] <= 1.6, ratios
    assert any("3.0" in n and "engine's" in n for n in preds["3.0-1-512"].notes)
    assert "vllm@2.0" in score(list(preds.values()))["by_version"]
    assert PerfParams().overhead_scale == 1.0


def test_a_versions_constants_keep_its_kernels_under_the_ceiling() -> None:
    """A release measured far faster than its engine's other release: its factor on the engine's
    compute scale may not put a kernel of its rows above the ceiling × its peak."""
    fast, slow = _rows("1.0", 0.05, 20), _rows("2.0", 1.0, 20)

    def fastest(ceiling: float | None) -> float:
        table, _, _ = fit(fast + slow, MODELS, ParamTable(), rounds=1, sweeps=2, versions=True, ceiling=ceiling)
        return fastest_kernel(table.resolve("h100", "vllm", "1.0")[0])

    assert fastest(None) > 1.0
    assert fastest(0.95) <= 0.95 + 1e-9
