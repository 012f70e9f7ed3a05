"""The cluster fixture: a coordinator with workers that run distributed statements."""

from __future__ import annotations

import asyncpg

from tests.citus.cluster import Cluster


async def test_the_coordinator_has_active_workers_that_hold_shards(
    citus_cluster: Cluster,
) -> None:
    connection = await asyncpg.connect(citus_cluster.url)
    try:
        workers = await connection.fetch("SELECT * FROM citus_get_active_worker_nodes()")
        assert len(workers) >= (len(citus_cluster.workers) or 1)
        await connection.execute("CREATE TABLE fixture_probe (k int PRIMARY KEY)")
        try:
            await connection.execute("SELECT create_distributed_table('fixture_probe', 'k')")
            await connection.execute("INSERT INTO fixture_probe SELECT generate_series(1, 100)")
            assert await connection.fetchval("SELECT count(*) FROM fixture_probe") == 100
            nodes = await connection.fetchval(
                "SELECT count(DISTINCT nodeport) FROM citus_shards "
                "WHERE table_name = 'fixture_probe'::regclass"
            )
            assert nodes == len(workers)
        finally:
            await connection.execute("DROP TABLE fixture_probe")
    finally:
        await connection.close()
