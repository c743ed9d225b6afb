from hypothesis import given
from hypothesis import strategies as st

from tokenmill.core.hashing import token_block_ids


@given(st.lists(st.integers(0, 200_000), max_size=300), st.sampled_from([1, 4, 16, 64]))
def test_one_id_per_full_block_and_prefix_property(tokens: list[int], block: int) -> None:
    ids = token_block_ids(tokens, block)
    assert len(ids) == len(tokens) // block
    # a prefix of the tokens gives a prefix of the ids
    cut = len(tokens) // 2
    assert token_block_ids(tokens[:cut], block) == ids[: cut // block]
    assert all(0 <= i < 2**63 for i in ids)


def test_ids_depend_on_the_whole_prefix() -> None:
    a = token_block_ids([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = token_block_ids([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert a[1] != b[1]  # same second block, different history
    assert token_block_ids([1, 2, 3, 4, 5, 6, 7, 8], 4) == a  # deterministic
