"""The predicted curve's labels: one per place, so points that coincide do not overprint."""

from __future__ import annotations

from pathlib import Path

from tokenmill.report.prediction_figures import _label_places, curve_figure


def test_points_that_coincide_share_one_label() -> None:
    """A curve that saturates (128 and 256 lanes at nearly one point), two layouts that agree at 64
    lanes or nearly agree at 16, and points apart that keep their own labels."""
    points = [
        (10.0, 100.0, 16),
        (44.10, 66.0, 128),
        (44.12, 66.01, 256),  # within 1/40 of the ranges of the 128-lane point
        (48.0, 43.0, 64),
        (48.0, 43.0, 64),  # the other layout's 64 lanes, at the same place
        (70.0, 16.0, 1),
        (33.3, 55.7, 16),
        (32.7, 54.6, 16),  # another layout's 16 lanes, 1 % of the ranges away: its label would overlap
        (34.0, 50.0, 32),  # 7 % below: its own label
    ]
    assert _label_places(points) == {
        (10.0, 100.0): [16],
        (44.10, 66.0): [128, 256],
        (48.0, 43.0): [64],
        (70.0, 16.0): [1],
        (33.3, 55.7): [16],
        (34.0, 50.0): [32],
    }
    assert _label_places([]) == {}


def test_a_saturated_curve_draws(tmp_path: Path) -> None:
    point = {"concurrency": 128, "tpot_ms": 22.7, "output_throughput_per_gpu": 66.0, "ttft_ms": 4000.0}
    curve = [point, {**point, "concurrency": 256, "ttft_ms": 19000.0}]
    out = curve_figure([("saturated", curve)], tmp_path / "c.svg")
    assert out.exists() and out.read_text().count("128, 256") == 1


def test_a_dollar_in_a_label_is_text_and_an_svg_is_the_same_file_twice(tmp_path: Path) -> None:
    """Found by fuzzing: a label with "$^^$" went to matplotlib's TeX parser and failed after the
    run; and an SVG carried its date and random ids, so the same figure differed byte for byte."""
    point = {"concurrency": 4, "tpot_ms": 10.0, "output_throughput_per_gpu": 100.0, "ttft_ms": 300.0}
    for name in ("a.svg", "b.svg"):
        curve_figure([("a$^^$ \\q $x$", [point])], tmp_path / name)
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()
