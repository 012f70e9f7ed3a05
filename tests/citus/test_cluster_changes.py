"""Runs in flight survive the cluster changing under them: a shard moved to another
node, a worker node restarted, and retention dropping old partitions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from legato.engine.repositories import partitions
from tests.citus.cluster import Cluster
from tests.e2e.flows import app, chain

RUNS = 60


async def _completions(engine: AsyncEngine, schema: str) -> list[tuple[str, int]]:
    """Each run's count of applied task completions (chain completes three tasks)."""
    async with engine.connect() as conn:
        rows = await conn.exec_driver_sql(
            f'SELECT run_id::text AS run_id, count(*) AS applied FROM "{schema}".run_events '
            "WHERE type = 'task_completed' GROUP BY run_id"
        )
        counted: list[tuple[str, int]] = [(str(r.run_id), int(r.applied)) for r in rows.all()]
        return counted


async def _move_a_key(cluster: Cluster, schema: str) -> None:
    """Move the Citus shard of key 0 (with its co-located shards) to another worker."""
    connection = await asyncpg.connect(cluster.url)
    try:
        shard = await connection.fetchval(
            "SELECT get_shard_id_for_distribution_column($1::regclass, 0::smallint)",
            f"{schema}.runs",
        )
        source = await connection.fetchrow(
            "SELECT nodename, nodeport FROM citus_shards WHERE shardid = $1", shard
        )
        target = await connection.fetchrow(
            "SELECT node_name, node_port FROM citus_get_active_worker_nodes() "
            "WHERE node_port <> $1 LIMIT 1",
            source["nodeport"],
        )
        await connection.execute(
            "SELECT citus_move_shard_placement($1, $2, $3, $4, $5, "
            "shard_transfer_mode => 'block_writes')",
            shard,
            source["nodename"],
            source["nodeport"],
            target["node_name"],
            target["node_port"],
        )
        moved = await connection.fetchval(
            "SELECT nodeport FROM citus_shards WHERE shardid = $1", shard
        )
        assert moved == target["node_port"]
    finally:
        await connection.close()


async def test_a_shard_move_and_a_worker_restart_lose_no_run_and_apply_nothing_twice(
    citus_cluster: Cluster, citus_engine: AsyncEngine, citus_schema: str
) -> None:
    if len(citus_cluster.workers) < 2 or citus_cluster.workers[0].server is None:
        pytest.skip("needs the two-worker cluster the tests start (not LEGATO_CITUS_URL's)")
    runtime = Runtime(citus_engine, app, poll_interval=0.2, grace_period=2.0)
    await runtime.start()
    try:
        async with Client(citus_engine, app=app) as client:
            handles = [await client.start(chain, n) for n in range(RUNS // 2)]
            await _move_a_key(citus_cluster, citus_schema)
            handles += [await client.start(chain, n) for n in range(RUNS // 2, RUNS)]
            restarted = citus_cluster.workers[1]
            await asyncio.to_thread(restarted.stop, "immediate")  # a crash of the node
            await asyncio.to_thread(restarted.start)
            results = [await handle.result(timeout=120) for handle in handles]
    finally:
        await runtime.stop()
    inputs = [*range(RUNS // 2), *range(RUNS // 2, RUNS)]
    assert results == [(n + 1) * 2 + 1 for n in inputs]
    completions = await _completions(citus_engine, citus_schema)
    assert len(completions) == RUNS
    assert all(count == 3 for _run, count in completions), completions


async def test_partitions_are_made_ahead_and_retention_runs_on_the_cluster(
    citus_cluster: Cluster, citus_engine: AsyncEngine, citus_schema: str
) -> None:
    runtime = Runtime(citus_engine, app, poll_interval=0.2, grace_period=2.0)
    await runtime.start()
    try:
        async with Client(citus_engine, app=app) as client:
            handle = await client.start(chain, 1)
            assert await handle.result(timeout=60) == 5
            # Sequential DDL: the new month's four partitions get their shards on each node.
            async with citus_engine.begin() as conn:
                created = await partitions.ensure(conn, months_ahead=5)
            assert any(name.startswith("runs_p") for name in created), created
            async with citus_engine.begin() as conn:
                outcome = await partitions.drop(conn, partitions.month_start(datetime.now(UTC)))
            assert outcome == []  # no month has ended since the schema was made
            assert (await client.get_run(handle.run_id)).run.status.value == "SUCCEEDED"
    finally:
        await runtime.stop()
    connection = await asyncpg.connect(citus_cluster.url)
    try:
        kinds = await connection.fetch(
            "SELECT citus_table_type FROM citus_tables t JOIN pg_class c ON c.oid = t.table_name "
            "WHERE c.relnamespace = $1::regnamespace AND c.relname = ANY($2::text[])",
            citus_schema,
            created,
        )
        assert len(kinds) == len(created)
        assert {row["citus_table_type"] for row in kinds} == {"distributed"}
    finally:
        await connection.close()
