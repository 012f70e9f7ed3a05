"""The Citus shard count of a distributed install: each Legato key in a shard of its own."""

from __future__ import annotations

import pytest

from legato.distributed import citus_shard_count, citus_shard_index

# hashint2(k::smallint) for k = 0..15, as PostgreSQL (and so Citus) computes it.
HASHES_OF_16_KEYS = [
    -272711505, -1905060026, 1134484726, -28094569, -1011077333, -1330264708, 566031088,
    -978793473, -2047600124, 1672378334, -1547814713, 2011968649, 1938269380, 1073282396,
    -1018458207, -1889599194,
]  # fmt: skip


def test_the_hash_space_is_split_in_equal_ranges_the_last_taking_the_rest() -> None:
    assert citus_shard_index(-(2**31), 4) == 0
    assert citus_shard_index(-1, 4) == 1
    assert citus_shard_index(0, 4) == 2
    assert citus_shard_index(2**31 - 1, 4) == 3
    assert citus_shard_index(2**31 - 1, 3) == 2  # 2**32 is not a multiple of 3


def test_sixteen_keys_need_140_shards_to_sit_alone() -> None:
    count = citus_shard_count(HASHES_OF_16_KEYS)
    assert count == 140
    assert len({citus_shard_index(h, count) for h in HASHES_OF_16_KEYS}) == 16
    for fewer in range(16, count):
        assert len({citus_shard_index(h, fewer) for h in HASHES_OF_16_KEYS}) < 16


@pytest.mark.parametrize("keys", [1, 2, 4, 8])
def test_fewer_keys_take_the_first_keys_hashes(keys: int) -> None:
    count = citus_shard_count(HASHES_OF_16_KEYS[:keys])
    assert count >= keys
    assert len({citus_shard_index(h, count) for h in HASHES_OF_16_KEYS[:keys]}) == keys
