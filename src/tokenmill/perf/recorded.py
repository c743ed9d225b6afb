"""What a recording replay hands calibration: each (sub-)step's demands and its weight in the
benchmark's mean TTFT and mean TPOT, as arrays the fit multiplies by candidate constants.

Apart from :mod:`tokenmill.perf.replay` so that numpy is imported only when a replay records
(``calibrate fit``), not by ``tokenmill predict``, which answers a single point and pays every
import in its response time (issue 4: under 1 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokenmill.perf.roofline import Features


@dataclass
class Recorded:
    """Demands (rows × features) and weights: mean TTFT = Σ m·ttft_w·t(row), mean TPOT likewise,
    where m is the lock-step weight w (``replay.lock_step_weight``, from the constants and
    ``prompt_steps``) for rows of the synchronised replay (``sync`` = 1), 1 − w for rows of the
    desynchronised one (``sync`` = 0) and 1 for per-request latencies (``sync`` = 2).
    ``prompt_steps``: the steps one wave's prompts fill (``replay.wave_prompt_steps``), the same for
    both regimes of a point."""

    features: np.ndarray
    ttft_w: np.ndarray
    tpot_w: np.ndarray
    sync: np.ndarray
    prompt_steps: float = 0.0

    def concat(self, other: Recorded) -> Recorded:
        return Recorded(
            np.vstack([self.features, other.features]),
            np.concatenate([self.ttft_w, other.ttft_w]),
            np.concatenate([self.tpot_w, other.tpot_w]),
            np.concatenate([self.sync, other.sync]),
            max(self.prompt_steps, other.prompt_steps),
        )

    def mix(self, lock_step: float) -> np.ndarray:
        """Each row's regime weight, ``lock_step`` being the synchronised replay's."""
        return np.where(self.sync == 1, lock_step, np.where(self.sync == 0, 1.0 - lock_step, 1.0))


def step_rows(
    features: Sequence[Features],
    mult: Sequence[float],
    step: Sequence[int],
    step_ttft: Sequence[float],
    step_tpot: Sequence[float] | None,
    sync: int,
) -> Recorded:
    """The sub-steps of one replay, each weighted by its step's weights times its multiplicity;
    sub-steps that weigh nothing in either mean are dropped. ``step_tpot`` None: no TPOT weight."""
    idx = np.asarray(step, dtype=np.int64)
    m = np.asarray(mult)
    tw = np.asarray(step_ttft)[idx] * m
    pw = np.asarray(step_tpot)[idx] * m if step_tpot is not None else np.zeros(len(idx))
    keep = (tw != 0) | (pw != 0)
    feats = np.asarray(features, dtype=float).reshape(len(features), -1)[keep]
    return Recorded(feats, tw[keep], pw[keep], np.full(int(keep.sum()), sync, dtype=np.int8))


def latency_rows(
    rows: Sequence[Features], ttft: Sequence[float], tpot: Sequence[float], prompt_steps: float = 0.0
) -> Recorded:
    """Per-request latencies (front end, transfers): weight 1 whatever the burst share. A point's
    recording starts with them, and carries its ``prompt_steps``."""
    return Recorded(
        np.asarray(rows, dtype=float),
        np.asarray(ttft),
        np.asarray(tpot),
        np.full(len(rows), 2, dtype=np.int8),
        prompt_steps,
    )
