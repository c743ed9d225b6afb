"""Scores of row predictions: the absolute errors, the signed median (which way a group misses) and
groups by any key (``perf.scoring``), on predictions whose errors are set by hand."""

from __future__ import annotations

import pytest

from tokenmill.perf.row_prediction import RowPrediction
from tokenmill.perf.scoring import before_after, group_stats, score


def _pred(rid: str, ratio_ttft: float, ratio_tpot: float, backend: str = "vllm") -> RowPrediction:
    """A row measured at 100 ms and 10 ms, predicted at ``ratio`` × those."""
    return RowPrediction(
        rid,
        ttft_ms=100 * ratio_ttft,
        tpot_ms=10 * ratio_tpot,
        backend=backend,
        measured_ttft_ms=100.0,
        measured_tpot_ms=10.0,
    )


def test_the_signed_median_says_which_way_a_group_misses() -> None:
    preds = [_pred("a", 1.2, 0.5), _pred("b", 0.9, 0.9), _pred("c", 1.5, 1.1)]
    overall = score(preds)["overall"]
    assert overall["ttft_median_ape"] == pytest.approx(0.2)  # |+20 %|, |−10 %|, |+50 %|
    assert overall["ttft_median_error"] == pytest.approx(0.2)
    assert overall["tpot_median_ape"] == pytest.approx(0.1)  # |−50 %|, |−10 %|, |+10 %|
    assert overall["tpot_median_error"] == pytest.approx(-0.1)


def test_groups_by_any_key_an_empty_key_counted_apart() -> None:
    preds = [
        _pred("a", 2.0, 1.0, backend="sglang"),
        _pred("b", 0.5, 1.0, backend="vllm"),
        _pred("c", 0.7, 1.0, backend=""),
        RowPrediction("d", skipped_reason="no config", backend="vllm"),
    ]
    groups = group_stats(preds, lambda p: p.backend)
    assert list(groups) == ["(empty)", "sglang", "vllm"]
    assert groups["sglang"]["ttft_median_error"] == pytest.approx(1.0)
    assert groups["vllm"]["rows"] == 2 and groups["vllm"]["predicted"] == 1 and groups["vllm"]["coverage"] == 0.5
    assert groups["vllm"]["ttft_median_error"] == pytest.approx(-0.5)
    assert groups["(empty)"]["ttft_median_error"] == pytest.approx(-0.3)
    assert score(preds)["by_backend"] == groups  # the fixed groupings are the same function


def test_a_group_with_nothing_measured_has_no_errors() -> None:
    unmeasured = RowPrediction("x", ttft_ms=50.0, tpot_ms=5.0)
    stats = group_stats([unmeasured], lambda p: "all")["all"]
    assert stats["predicted"] == 1 and stats["scored"] == 0
    assert stats["ttft_median_error"] is None and stats["tpot_median_ape"] is None


def test_before_and_after_scores_only_rows_both_predict() -> None:
    start = [_pred("a", 2.0, 1.5), _pred("b", 1.4, 1.2), _pred("c", 0.5, 0.8), RowPrediction("d", skipped_reason="x")]
    fitted = [_pred("a", 1.1, 1.0), _pred("b", 0.9, 1.05), RowPrediction("c", skipped_reason="y"), _pred("d", 1.0, 1.0)]
    result = before_after(start, fitted)
    assert result["rows"] == 4 and result["scored"] == 2  # c and d are predicted on one side only
    assert result["start_ttft_median_ape"] == pytest.approx(0.7)  # |+100 %| and |+40 %|
    assert result["fitted_ttft_median_ape"] == pytest.approx(0.1)  # |+10 %| and |−10 %|
    assert result["start_tpot_median_ape"] == pytest.approx(0.35)  # |+50 %| and |+20 %|
    assert result["fitted_tpot_median_ape"] == pytest.approx(0.025)  # |0 %| and |+5 %|
    assert [r["id"] for r in result["per_row"]] == ["a", "b", "c", "d"]
    assert result["per_row"][2] == {
        "id": "c",
        "measured_ttft_ms": 100.0,
        "start_ttft_ms": 50.0,
        "fitted_ttft_ms": None,
        "measured_tpot_ms": 10.0,
        "start_tpot_ms": 8.0,
        "fitted_tpot_ms": None,
        "skipped_reason": "y",
    }
    assert result["per_row"][3]["skipped_reason"] == "x" and result["per_row"][0]["skipped_reason"] == ""
    with pytest.raises(ValueError, match="not of the same rows"):
        before_after(start, fitted[::-1])
