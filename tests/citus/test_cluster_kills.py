"""Kill -9 on the cluster: decider and worker processes killed, and a Citus worker node
crashed and restarted, while a few hundred runs are in flight on a distributed install.
Every run finishes, no task completion is applied twice, and no two-phase transaction is
left prepared on a node."""

from __future__ import annotations

import asyncio
import functools
import signal
import subprocess
from collections.abc import Callable, Iterator

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from legato.runtime import Roles
from tests.citus.cluster import Cluster
from tests.citus.conftest import CITUS_TEST_KEYS
from tests.citus.test_cluster_changes import _completions
from tests.e2e import flows
from tests.e2e.test_shard_kills import WORKER_ROLE, _every_key_held_by
from tests.helpers import eventually, started_processes

RUNS = 200

Spawn = Callable[[str], subprocess.Popen[bytes]]


@pytest.fixture
def spawn(citus_cluster: Cluster, citus_schema: str) -> Iterator[Spawn]:
    """``tests.e2e.procs`` processes on the cluster's coordinator, serving the test's
    schema (``LEGATO_SCHEMA``, set by ``citus_schema``)."""
    with started_processes() as start:

        def spawn(role: str) -> subprocess.Popen[bytes]:
            return start(
                "tests.e2e.procs",
                role,
                "--database-url",
                citus_cluster.url,
                "--lease",
                "2",
                "--shard-lease",
                "2",
            )

        yield spawn


async def _prepared_on_nodes(cluster: Cluster) -> int:
    """Two-phase transactions still prepared on the workers (Citus' recovery settles
    those a crash left once the node is back)."""
    total = 0
    for node in cluster.workers:
        connection = await asyncpg.connect(node.url(cluster.database))
        try:
            total += int(await connection.fetchval("SELECT count(*) FROM pg_prepared_xacts"))
        finally:
            await connection.close()
    return total


async def test_kill_9_of_processes_and_a_node_restart_lose_and_double_nothing(
    citus_cluster: Cluster, citus_engine: AsyncEngine, citus_schema: str, spawn: Spawn
) -> None:
    if len(citus_cluster.workers) < 2:
        pytest.skip("needs the two-worker cluster the tests start (not LEGATO_CITUS_URL's)")
    engine = citus_engine
    deciders = [spawn("decider") for _ in range(2)]
    workers = [spawn("worker") for _ in range(2)]
    # Timers and the lease sweeper in this process.
    helper = Runtime(engine, flows.app, roles=Roles(decider=False, worker=False), poll_interval=0.2)
    await helper.start()
    try:
        async with Client(engine, app=flows.app) as client:
            for role, processes in (("decider", deciders), (WORKER_ROLE, workers)):
                pids = [p.pid for p in processes]
                await eventually(
                    functools.partial(_every_key_held_by, engine, role, pids, CITUS_TEST_KEYS),
                    f"the {role} processes to share all {CITUS_TEST_KEYS} keys",
                    timeout=90,
                )
            handles = await client.start_many(flows.chain, list(range(RUNS)))

            async def some_finished() -> bool:
                return len(await _completions(engine, citus_schema)) >= RUNS // 8

            await eventually(some_finished, "some runs to make progress", timeout=90)
            for victim in (deciders[0], workers[0]):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
            restarted = citus_cluster.workers[1]
            await asyncio.to_thread(restarted.stop, "immediate")  # a crash of the node
            await asyncio.to_thread(restarted.start)
            results = [await handle.result(timeout=180) for handle in handles]
    finally:
        await helper.stop()
    assert results == [(value + 1) * 2 + 1 for value in range(RUNS)]
    applied = await _completions(engine, citus_schema)
    assert len(applied) == RUNS
    assert {count for _, count in applied} == {3}, "a completion was applied twice (or lost)"

    async def settled() -> bool:
        return await _prepared_on_nodes(citus_cluster) == 0

    await eventually(settled, "no two-phase transaction left prepared on a node", timeout=60)
