"""Tokens a speculative verify pass accepts: the default for a drafter, and a given value checked.

Why a module of its own: ``predict`` and ``simulate``/``sweep`` take the same ``--accept-length``
and must read it the same way (the simulator's executor turns a NaN into a crash several calls
down), and neither should import the other's machinery for it.
"""

from __future__ import annotations

from tokenmill.errors import TokenmillError
from tokenmill.plan.memory_plan import MemoryPlan

__all__ = ["DSPARK_ACCEPT_LENGTH", "accept_length_for", "default_accept_length"]

DSPARK_ACCEPT_LENGTH = 2.7  # seed §2.3: what the server reported on agent requests at temperature 1.0


def default_accept_length(plan: MemoryPlan) -> float:
    """The drafter's tokens per verify pass when none is given: DSPARK's 2.7 (the seed), an MTP
    drafter of N tokens 1 + 0.75 N; 1 without speculative decoding."""
    spec = plan.layout.speculative
    if not spec.enabled:
        return 1.0
    return DSPARK_ACCEPT_LENGTH if spec.algorithm == "dspark" else 1.0 + 0.75 * spec.tokens


def accept_length_for(plan: MemoryPlan, accept_length: float | None) -> float:
    """The tokens a verify pass of ``plan``'s drafter accepts: ``accept_length`` checked against
    the verify width, or the drafter's default; 1 without speculative decoding."""
    spec = plan.layout.speculative
    if accept_length is not None and not spec.enabled:
        raise TokenmillError("--accept-length needs speculative decoding (--speculative dspark:B or mtp:N)")
    accept = default_accept_length(plan) if accept_length is None else accept_length
    width = spec.num_draft_tokens if spec.enabled else 1
    if not 1 <= accept <= width:  # also refuses nan
        raise TokenmillError(f"--accept-length must be between 1 and the verify width {width} (got {accept})")
    return accept
