"""``params.override``: ``--set KEY=VALUE`` what-ifs on the constants, refused outside their physical
bounds or in the wrong unit, with a line per change."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.perf.params import BOUNDS, PerfParams, override


def test_sets_the_named_constants_and_says_what_changed() -> None:
    base = PerfParams()
    new, note = override(base, ["collective_latency_s=5e-6", "overhead-scale=1.5"])
    assert new.collective_latency_s == 5e-6 and new.overhead_scale == 1.5
    assert new.compute_scale == base.compute_scale  # the rest untouched
    assert note == (
        "constants set by --set, a what-if the fit did not make: "
        "collective_latency_s 8e-06 → 5e-06; overhead_scale 1 → 1.5"
    )


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("foo=1", "KEY one of"),  # not a constant
        ("collective_latency_s", "KEY=VALUE"),  # no value
        ("compute_scale=fast", "is not a number"),
        ("collective_latency_s=5", "between 1e-06 and 0.00015"),  # 5 s, meant 5 µs
        ("cpu_overlap=2", "between 0 and 1"),  # a fraction
        ("sampling_per_token_s=-1e-6", "between 0 and inf"),
        ("step_overhead_s=nan", "between"),
        ("weight_bandwidth_efficiency=inf", "between"),
    ],
)
def test_refuses_a_bad_item_naming_the_flag(item: str, says: str) -> None:
    with pytest.raises(TokenmillError, match=r"^--set") as err:
        override(PerfParams(), [item])
    assert says in str(err.value)


@given(st.sampled_from(sorted(BOUNDS)), st.floats(allow_nan=True, allow_infinity=True))
def test_a_value_is_taken_exactly_when_inside_its_bounds(key: str, value: float) -> None:
    lo, hi = BOUNDS[key]
    inside = math.isfinite(value) and lo <= value <= hi
    try:
        new, _ = override(PerfParams(), [f"{key}={value!r}"])
    except TokenmillError:
        assert not inside
    else:
        assert inside and getattr(new, key) == value
