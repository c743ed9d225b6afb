"""The planner's figures: axis labels as numbers (not the TeX matplotlib writes for a log axis,
which the figures print as typed, since ``figure_base.pyplot`` keeps user text from being parsed as TeX), and
the visible-memory line named where it crosses nothing."""

from __future__ import annotations

import re
from pathlib import Path

from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory
from tokenmill.plan.memory_plan import MemoryPlan
from tokenmill.report.calibration_figures import ScoredPoint, calibration_figure
from tokenmill.report.memory_figures import memory_bars, state_vs_cache
from tokenmill.report.sim_figures import latency_figure
from tokenmill.spec import load_model


def _k3_low_latency() -> MemoryPlan:
    return plan_memory(load_model("kimi-k3"), load_gpu("b300"), 8, Layout(tp=8, pool_ratio=1.1))


def _texts(svg: Path) -> list[str]:
    """The strings matplotlib drew (it writes each as a comment before its glyphs)."""
    return [t.strip() for t in re.findall(r"<!-- (.*?) -->", svg.read_text())]


def test_the_state_figure_labels_its_log_axes_with_numbers(tmp_path: Path) -> None:
    """Seen when the K3 figure was redrawn: its ticks read ``$\\mathdefault{10^{3}}$``."""
    plan = _k3_low_latency()
    texts = _texts(state_vs_cache(plan, tmp_path / "s.svg"))
    assert not [t for t in texts if "mathdefault" in t or "$" in t]
    # request lengths 500 to ~190,000 tokens and 13 to 5,000 MiB: three decades on each axis
    assert {"1000", "10000", "100000", "10", "100"} <= set(texts)


def test_every_log_axis_figure_is_free_of_tex(tmp_path: Path) -> None:
    points = [ScoredPoint("vllm", 110.0, 100.0, 11.0, 10.0), ScoredPoint("sglang", 5000.0, 100.0, 90.0, 10.0)]
    results = {
        "layouts": {"a": {"concurrency": [{"concurrency": c, "mean_tpot_ms": c, "mean_ttft_ms": c} for c in (1, 64)]}}
    }
    for svg in (calibration_figure(points, tmp_path / "c.svg"), latency_figure(results, tmp_path / "l.svg")):
        assert not [t for t in _texts(svg) if "mathdefault" in t], svg.name


def test_the_bars_name_the_visible_memory_in_their_legend(tmp_path: Path) -> None:
    plan = _k3_low_latency()
    texts = _texts(memory_bars([plan], tmp_path / "m.svg"))
    # B300: 275,040 MiB visible (the catalog) = 268.6 GiB
    assert "visible memory: 268.6 GiB" in texts
