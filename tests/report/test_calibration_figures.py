"""The calibration figures: files of the right kind, the points where the data put them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.report.calibration_figures import ScoredPoint, SplitPoint, calibration_figure, tpot_split_figure

SPLIT = [
    SplitPoint("trtllm 1.0.0rc3", 19.7, 21.9, 4823.0, 1444.0),
    SplitPoint("trtllm 1.0.0rc3", 10.8, 13.7, 1174.0, 460.0),
    SplitPoint("sglang 0.5.1.post1", 21.4, 25.0, 1107.0, 2007.0),
]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_split_figure_writes_the_file(tmp_path: Path, suffix: str) -> None:
    path = tpot_split_figure(SPLIT, tmp_path / f"split{suffix}")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data
    if suffix == ".svg":
        text = data.decode()
        # the legend counts configurations per release; the corner gives the median |error| of H:
        # |1444/4823 − 1|, |460/1174 − 1|, |2007/1107 − 1| = 70.1 %, 60.8 %, 81.3 % → 70.1 %
        assert "trtllm 1.0.0rc3 (2)" in text and "sglang 0.5.1.post1 (1)" in text
        assert "median |error| 70.1 %" in text


def test_scatter_figure_writes_the_file(tmp_path: Path) -> None:
    points = [ScoredPoint("vllm", 110.0, 100.0, 11.0, 10.0), ScoredPoint("sglang", 50.0, 100.0, 9.0, 10.0)]
    text = calibration_figure(points, tmp_path / "scatter.svg").read_text()
    # TTFT errors 10 % and 50 %: median 30 %, one of two within ±20 %
    assert "median |error| 30.0 %" in text and "within ±20 % (dashed): 50 % of rows" in text


def test_figures_refuse_other_formats(tmp_path: Path) -> None:
    with pytest.raises(TokenmillError, match=r"\.png|\.svg"):
        tpot_split_figure(SPLIT, tmp_path / "split.pdf")
