"""Migration 0011's shard key: the SQL functions agree with ``legato.schema.shards``, the
key count is recorded, and rows written before the upgrade get the key of their run."""

from __future__ import annotations

import random
import uuid

import pytest
from sqlalchemy import text

from legato import migrations
from legato.db import create_engine
from legato.db.server_check import check_database
from legato.errors import ConfigurationError
from legato.schema import Shards, uuid7
from legato.schema.shards import DEFAULT_SHARD_COUNT


@pytest.mark.parametrize("count", [1, 7, DEFAULT_SHARD_COUNT, 256])
async def test_sql_functions_compute_the_python_keys(empty_database_url: str, count: int) -> None:
    engine = create_engine(empty_database_url, "legato")
    shards = Shards(count)
    chance = random.Random(count)
    random_ids = [uuid.UUID(int=chance.getrandbits(128)) for _ in range(50)]
    ids = [uuid7() for _ in range(200)] + random_ids
    keys = ["acme", "tenant-42", "é", "x" * 200] + [str(chance.random()) for _ in range(100)]
    try:
        await migrations.upgrade(engine, "legato")
        async with engine.connect() as conn:
            of_runs = (
                await conn.execute(
                    text(
                        "SELECT legato.shard_of_run_v1(id, :n) "
                        "FROM unnest(CAST(:ids AS uuid[])) AS id"
                    ),
                    {"n": count, "ids": ids},
                )
            ).scalars()
            of_keys = (
                await conn.execute(
                    text(
                        "SELECT legato.shard_of_key_v1(k, :n) "
                        "FROM unnest(CAST(:keys AS text[])) AS k"
                    ),
                    {"n": count, "keys": keys},
                )
            ).scalars()
            assert list(of_runs) == [shards.of_run(run_id) for run_id in ids]
            assert list(of_keys) == [shards.of_key(key) for key in keys]
    finally:
        await engine.dispose()


def test_a_new_run_id_lies_in_its_key_and_keeps_time_order() -> None:
    shards = Shards(DEFAULT_SHARD_COUNT)
    ids = [shards.new_run_id(shard) for shard in list(shards.all()) * 20]
    assert [shards.of_run(run_id) for run_id in ids] == list(shards.all()) * 20
    assert all(run_id.version == 7 for run_id in ids)
    assert [run_id.int >> 16 for run_id in ids] == sorted(run_id.int >> 16 for run_id in ids)


async def test_the_key_count_is_recorded_and_read_at_connect(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "keyed")
    try:
        await migrations.upgrade(engine, "keyed", shard_count=8)
        async with engine.connect() as conn:
            assert await check_database(conn, "keyed") == Shards(8)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("count", [0, 257, "many"])
async def test_a_bad_key_count_is_refused_before_anything_is_written(
    empty_database_url: str, count: object
) -> None:
    engine = create_engine(empty_database_url, "badcount")
    try:
        with pytest.raises(ConfigurationError, match="shard count"):
            await migrations.upgrade(engine, "badcount", shard_count=count)  # type: ignore[arg-type]
        async with engine.connect() as conn:
            found = await conn.execute(
                text("SELECT count(*) FROM pg_namespace WHERE nspname = 'badcount'")
            )
            assert found.scalar_one() == 0
    finally:
        await engine.dispose()
