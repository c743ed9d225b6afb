"""Layout flags parsed from text: every string either parses or is one TokenmillError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.plan.layout import Speculation


@pytest.mark.parametrize("text", ["dspark:²", "mtp:³", "dspark:٣", "mtp:0", "mtp:-1", "eagle:3", "dspark:"])
def test_a_bad_speculative_value_is_one_error(text: str) -> None:
    """Superscript and Arabic-Indic digits pass ``str.isdigit`` but not ``int``: found by fuzzing."""
    with pytest.raises(TokenmillError, match=r"^--speculative must be none, dspark:B or mtp:N"):
        Speculation.parse(text)


def test_good_speculative_values_parse() -> None:
    assert str(Speculation.parse(" DSPARK:7 ")) == "dspark:7" and not Speculation.parse("none").enabled


@given(
    st.text(max_size=12) | st.builds(lambda a, n: f"{a}:{n}", st.sampled_from(["dspark", "mtp"]), st.text(max_size=4))
)
def test_any_text_parses_or_is_a_tokenmill_error(text: str) -> None:
    try:
        spec = Speculation.parse(text)
    except TokenmillError:
        return
    assert not spec.enabled or spec.tokens >= 1
