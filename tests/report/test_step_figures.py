"""The step-breakdown figure: one stacked bar per step, its total written at its end, a published
figure marked; refused where it would leave out part of a step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.report.step_figures import StepBar, step_breakdown_figure

DECODE = StepBar("TP8", {"dense_linear": 4.43, "collectives": 3.49, "overhead": 5.18}, published_ms=7.7)
PREFILL = StepBar("TP8", {"dense_linear": 150.5, "routed_experts": 196.7, "collectives": 107.9})


def test_draws_each_panel_with_totals_and_the_same_svg_twice(tmp_path: Path) -> None:
    panels = [("decode", [DECODE, DECODE._replace(label="what-if", published_ms=None)]), ("prefill", [PREFILL])]
    step_breakdown_figure(panels, [tmp_path / "a.png", tmp_path / "a.svg"], title="K3")
    step_breakdown_figure(panels, tmp_path / "b.svg", title="K3")
    svg = (tmp_path / "a.svg").read_text()
    assert (tmp_path / "a.png").stat().st_size > 10_000
    assert svg == (tmp_path / "b.svg").read_text()
    for text in ("13.1", "455.1", "what-if", "published", "routed experts"):  # 4.43 + 3.49 + 5.18 = 13.1
        assert text in svg


@pytest.mark.parametrize(
    "panels",
    [
        [],
        [("decode", [])],
        [("decode", [StepBar("TP8", {"dense_linear": 1.0, "kv_transfer": 2.0})])],  # not a step's part
    ],
)
def test_refuses_a_figure_that_would_leave_out_part_of_a_step(tmp_path: Path, panels: list) -> None:
    with pytest.raises(TokenmillError):
        step_breakdown_figure(panels, tmp_path / "x.svg")
    assert not (tmp_path / "x.svg").exists()
