"""One error type for bad input, so the CLI can print it as a single line and exit non-zero.

Every message names the offending field or flag and says what is allowed, e.g.
``--tp must divide the 96 attention heads (got 64)``.
"""


class TokenmillError(ValueError):
    """Bad input: an unknown name, a missing field, an impossible layout, a malformed record."""
