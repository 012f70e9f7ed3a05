"""The distributed install: run-scoped tables by shard key, co-located, one key per shard."""

from __future__ import annotations

import uuid

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.distributed import (
    COORDINATOR_TABLES,
    REFERENCE_TABLES,
    RUN_TABLES,
    citus_shard_count,
)
from tests.citus.cluster import Cluster
from tests.citus.conftest import CITUS_TEST_KEYS, drop_schema
from tests.helpers import run_legato
from tests.unit.test_citus_shard_count import HASHES_OF_16_KEYS


async def _fetch(url: str, query: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(query, *args))
    finally:
        await connection.close()


async def _kinds(url: str, schema: str) -> dict[str, asyncpg.Record]:
    rows = await _fetch(
        url,
        "SELECT c.relname, t.citus_table_type, t.distribution_column, t.colocation_id, "
        "t.shard_count FROM citus_tables t JOIN pg_class c ON c.oid = t.table_name "
        "WHERE c.relnamespace = $1::regnamespace",
        schema,
    )
    return {row["relname"]: row for row in rows}


async def test_run_tables_are_co_located_by_shard_beside_reference_and_coordinator_tables(
    citus_cluster: Cluster, citus_schema: str
) -> None:
    kinds = await _kinds(citus_cluster.url, citus_schema)
    for table in RUN_TABLES:
        assert kinds[table]["citus_table_type"] == "distributed", table
        assert kinds[table]["distribution_column"] == "shard", table
    assert len({kinds[table]["colocation_id"] for table in RUN_TABLES}) == 1
    # Each month's and day's partitions are distributed with their table.
    partitions = [name for name in kinds if "_p2" in name or "_h" in name]
    assert partitions and all(kinds[p]["citus_table_type"] == "distributed" for p in partitions)
    for table in REFERENCE_TABLES:
        assert kinds[table]["citus_table_type"] == "reference", table
    for table in COORDINATOR_TABLES:
        assert kinds[table]["citus_table_type"] == "local", table
    # The foreign keys came back: a run of an unknown workflow is refused on its node.
    constraints = await _fetch(
        citus_cluster.url,
        "SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'f'",
        f"{citus_schema}.runs",
    )
    assert len(constraints) == 1


async def test_each_key_is_a_citus_shard_of_its_own(
    citus_cluster: Cluster, citus_schema: str
) -> None:
    placed = await _fetch(
        citus_cluster.url,
        "SELECT k, s.shardid, s.nodeport FROM generate_series(0, $2 - 1) AS k, "
        "LATERAL get_shard_id_for_distribution_column($1::regclass, k::smallint) AS id "
        "JOIN citus_shards s ON s.shardid = id",
        f"{citus_schema}.runs",
        CITUS_TEST_KEYS,
    )
    assert len(placed) == CITUS_TEST_KEYS
    assert len({row["shardid"] for row in placed}) == CITUS_TEST_KEYS
    if len(citus_cluster.workers) > 1:  # the keys are spread, not all on one node
        assert len({row["nodeport"] for row in placed}) > 1


async def test_sixteen_keys_land_alone_in_the_shard_count_chosen_for_them(
    citus_cluster: Cluster,
) -> None:
    hashes = await _fetch(
        citus_cluster.url, "SELECT hashint2(k::smallint) AS h FROM generate_series(0, 15) k"
    )
    assert [row["h"] for row in hashes] == HASHES_OF_16_KEYS
    table = f"probe_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(citus_cluster.url)
    try:
        await connection.execute(f"CREATE TABLE {table} (shard smallint)")
        await connection.execute(
            f"SELECT create_distributed_table('{table}', 'shard', shard_count => 140)"
        )
        shards = await connection.fetch(
            "SELECT DISTINCT get_shard_id_for_distribution_column($1::regclass, k::smallint) "
            "FROM generate_series(0, 15) k",
            table,
        )
        assert len(shards) == 16
    finally:
        await connection.execute(f"DROP TABLE {table}")
        await connection.close()


async def test_a_client_on_a_distributed_install_plans_each_statement_for_its_values(
    citus_engine: AsyncEngine,
) -> None:
    async with Client(citus_engine) as client:
        shards = await client.shards()
        assert shards.distributed and shards.count == CITUS_TEST_KEYS
        async with citus_engine.connect() as conn:
            settings = await conn.exec_driver_sql(
                "SELECT current_setting('plan_cache_mode'), "
                "current_setting('citus.override_table_visibility')"
            )
            assert settings.one() == ("force_custom_plan", "off")


async def test_upgrade_detects_citus_and_single_node_keeps_the_tables_local(
    citus_cluster: Cluster,
) -> None:
    url = citus_cluster.url
    detected, local = f"legato_{uuid.uuid4().hex[:8]}", f"legato_{uuid.uuid4().hex[:8]}"
    try:
        made = await run_legato(
            "db", "upgrade", "--shards", "2", "--schema", detected, database_url=url, timeout=120
        )
        assert made.status == 0, made.stderr
        assert f"schema {detected!r} is distributed over Citus (detected Citus)" in made.stdout
        citus_shards = citus_shard_count(HASHES_OF_16_KEYS[:2])
        tables = len(RUN_TABLES)
        assert f"{tables} tables by shard in {citus_shards} co-located Citus shards" in made.stdout
        again = await run_legato("db", "upgrade", "--schema", detected, database_url=url)
        assert again.status == 0, again.stderr
        assert "is distributed over Citus" in again.stdout
        kept = await run_legato(
            "db", "upgrade", "--single-node", "--shards", "2", "--schema", local, database_url=url
        )
        assert kept.status == 0, kept.stderr
        assert f"schema {local!r} is on the Citus coordinator alone" in kept.stdout
        assert await _kinds(url, local) == {}
        client = await Client.connect(url, schema=local)
        try:
            assert not (await client.shards()).distributed
        finally:
            await client.close()
    finally:
        await drop_schema(url, detected)
        await drop_schema(url, local)
