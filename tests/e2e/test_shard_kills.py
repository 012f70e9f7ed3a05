"""Key holders killed with ``kill -9``: on a schema of 8 shard keys, three decider and
three worker processes share the keys; one of each is killed while runs are in flight.
Every run finishes once, and every key is held again by a live process."""

from __future__ import annotations

import functools
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus, Runtime, migrations
from legato.db import create_engine
from legato.runtime import Roles, worker_role
from legato.schema import RunEvents, Runs, ShardOwners
from tests.e2e import flows
from tests.helpers import eventually, started_processes

KEYS = 8
RUNS = 240
LEASE_SECONDS = "2"
# The workers serve every queue of the flows app (tests/e2e/procs.py serves it whole).
WORKER_ROLE = worker_role(sorted({t.queue for t in flows.app.tasks.values()}), flows.app)

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest_asyncio.fixture
async def keyed_engine(empty_database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(empty_database_url, "legato")
    await migrations.upgrade(engine, "legato", shard_count=KEYS)
    yield engine
    await engine.dispose()


@pytest.fixture
def spawn(empty_database_url: str) -> Iterator[Spawn]:
    with started_processes() as start:

        def spawn(role: str) -> subprocess.Popen[bytes]:
            return start(
                "tests.e2e.procs",
                role,
                "--database-url",
                empty_database_url,
                "--lease",
                "2",
                "--shard-lease",
                LEASE_SECONDS,
            )

        yield spawn


async def _holders(engine: AsyncEngine, role: str) -> dict[str, list[int]]:
    """The live members of ``role`` and their keys."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(ShardOwners.owner, ShardOwners.shards).where(ShardOwners.role == role)
        )
        return {owner: sorted(shards) for owner, shards in rows.all()}


def _of(holders: dict[str, list[int]], pid: int) -> list[str]:
    return [owner for owner in holders if f":{pid}:" in owner]


async def _every_key_held_by(
    engine: AsyncEngine, role: str, pids: list[int], keys: int = KEYS
) -> bool:
    holders = await _holders(engine, role)
    live = {
        owner: keys for owner, keys in holders.items() if any(_of({owner: keys}, p) for p in pids)
    }
    held = sorted(key for keys in live.values() for key in keys)
    # Every process holds a share: a member that has joined but holds no key yet is not
    # a key holder to kill.
    return held == list(range(keys)) and len(live) == len(pids) and all(live.values())


async def test_kill_9_of_key_holders_loses_and_doubles_nothing(
    keyed_engine: AsyncEngine, spawn: Spawn
) -> None:
    engine = keyed_engine
    deciders = [spawn("decider") for _ in range(3)]
    workers = [spawn("worker") for _ in range(3)]
    # Timers and the lease sweeper in this process (they hold their keys alone).
    helper = Runtime(engine, flows.app, roles=Roles(decider=False, worker=False), poll_interval=0.2)
    await helper.start()
    try:
        async with Client(engine, app=flows.app) as client:
            for role, processes in (("decider", deciders), (WORKER_ROLE, workers)):
                pids = [p.pid for p in processes]
                await eventually(
                    functools.partial(_every_key_held_by, engine, role, pids),
                    f"the {role} processes to share all {KEYS} keys",
                    timeout=60,
                )
            handles = await client.start_many(flows.chain, list(range(RUNS)))
            installed = await client.shards()
            shards = {installed.of_run(handle.run_id) for handle in handles}
            assert shards == set(range(KEYS)), "the runs should spread over every key"

            async def some_finished() -> bool:
                return await _finished(engine) >= RUNS // 4

            await eventually(some_finished, "a quarter of the runs to finish", timeout=60)
            for victim in (deciders[0], workers[0]):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
            for role, processes in (("decider", deciders[1:]), (WORKER_ROLE, workers[1:])):
                pids = [p.pid for p in processes]
                await eventually(
                    functools.partial(_every_key_held_by, engine, role, pids),
                    f"the surviving {role} processes to take every key over",
                    timeout=60,
                )
            results = [await handle.result(timeout=120) for handle in handles]
    finally:
        await helper.stop()
    assert results == [(value + 1) * 2 + 1 for value in range(RUNS)]
    async with engine.connect() as conn:
        completions = await conn.execute(
            select(RunEvents.run_id, RunEvents.node_id).where(RunEvents.type == "task_completed")
        )
        per_node: dict[tuple[object, object], int] = {}
        for run_id, node_id in completions.all():
            per_node[(run_id, node_id)] = per_node.get((run_id, node_id), 0) + 1
    assert len(per_node) == RUNS * 3
    assert set(per_node.values()) == {1}, "a completion was applied twice"
    victims = (deciders[0].pid, workers[0].pid)
    for role in ("decider", WORKER_ROLE):
        holders = await _holders(engine, role)
        # A dead member's row stays until it expires and a survivor's round deletes it;
        # its keys went to the survivors.
        dead = [owner for pid in victims for owner in _of(holders, pid)]
        assert not any(holders[owner] for owner in dead), f"a dead {role} still holds keys"


async def _finished(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        result = await conn.execute(select(Runs.id).where(Runs.status == RunStatus.SUCCEEDED))
        return len(result.all())
