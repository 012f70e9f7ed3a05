"""kill -9 at every point of a transactional task: each run's writes land exactly once.

Worker processes (``tests/e2e/txprocs.py``) stop at a chosen point of their attempt and
say so with a marker file; the test kills them there, then a fresh worker (in the test
process) finishes. Each worker claims only from its share of the shard keys, so the test
waits for the victims to share the keys out and starts one run in a key of each. The
victims' shard leases are long (``txprocs --shard-lease``), so that a stall of a loaded
machine cannot move a key from a victim that has not claimed yet to one already stopped
at its point; the test removes the killed victims' rows itself instead of waiting for
them to expire.
"""

from __future__ import annotations

import random
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunHandle, Runtime
from legato.runtime import Roles, worker_role
from legato.schema import ShardOwners
from legato.schema.shards import Shards
from tests.e2e import txflows
from tests.e2e.test_transactional_tasks import create_ledger, ledger_rows
from tests.helpers import eventually, started_processes

Spawn = Callable[..., subprocess.Popen[bytes]]
POINTS = (*txflows.TRANSACTIONAL_POINTS, txflows.AFTER_COMMIT)
ROUNDS = 6  # one victim per point in each round: 30 kills


@pytest.fixture
def spawn(database_url: str) -> Iterator[Spawn]:
    """Start worker processes; any still alive are killed afterwards."""
    with started_processes() as start:

        def spawn(*extra: str) -> subprocess.Popen[bytes]:
            return start(
                "tests.e2e.txprocs",
                "--database-url",
                database_url,
                *extra,
                env={txflows.LEDGER_URL_ENV: database_url},
            )

        yield spawn


@pytest_asyncio.fixture
async def tx_client(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Client]:
    await create_ledger(engine)
    monkeypatch.setenv(txflows.LEDGER_URL_ENV, database_url)
    async with Client(engine, app=txflows.app) as client:
        yield client
    await txflows.dispose_ledger_engines()


@pytest_asyncio.fixture
async def decider_and_sweeper(engine: AsyncEngine, tx_client: Client) -> AsyncIterator[None]:
    """Decider, timers and lease sweeper in the test process; workers are processes."""
    runtime = Runtime(engine, txflows.app, roles=Roles(worker=False), poll_interval=0.2)
    await runtime.start()
    yield
    await runtime.stop()


Start = Callable[[Sequence[int]], Awaitable[Sequence[RunHandle[int]]]]
WORKER_ROLE = worker_role(sorted({t.queue for t in txflows.app.tasks.values()}), txflows.app)


async def shared_out(
    engine: AsyncEngine, shards: Shards, pids: Sequence[int]
) -> dict[int, list[int]] | None:
    """The keys of each victim (by pid) once the live workers are exactly the victims and
    the keys are shared out evenly among them, each key once; else None (keys are still
    changing hands, so a run started now could move to a victim busy with another)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(ShardOwners.owner, ShardOwners.shards).where(
                    ShardOwners.role == WORKER_ROLE, ShardOwners.expires_at > func.now()
                )
            )
        ).all()
    # An owner is "<role>@<host>:<pid>:<nonce>".
    held = {int(owner.rsplit(":", 2)[1]): sorted(keys) for owner, keys in rows}
    every = sorted(key for keys in held.values() for key in keys)
    sizes = [len(keys) for keys in held.values()]
    if sorted(held) != sorted(pids) or every != sorted(shards.all()):
        return None
    return held if min(sizes) > 0 and max(sizes) - min(sizes) <= 1 else None


async def kill_at_markers(
    client: Client, spawn: Spawn, points: list[str], marker_dir: Path, start: Start
) -> tuple[dict[uuid.UUID, str], Sequence[RunHandle[int]]]:
    """One single-slot victim per point; once the victims have shared out the keys,
    ``start`` one run in a key of each; once each victim has stopped at its point, kill
    -9 it. Returns the point each run was killed at, and the runs."""
    marker_dir.mkdir()  # noqa: ASYNC240 - a test's temporary directory
    victims = [
        (spawn("--kill-at", point, "--marker-dir", str(marker_dir), "--concurrency", "1"), point)
        for point in points
    ]
    pids = [proc.pid for proc, _ in victims]
    shares: dict[int, list[int]] = {}

    shards = await client.shards()

    async def settled() -> bool:
        shares.update(await shared_out(client.engine, shards, pids) or {})
        return bool(shares)

    await eventually(settled, "the victims to share out the keys", timeout=180)
    handles = await start([shares[pid][0] for pid in pids])
    markers = [marker_dir / str(proc.pid) for proc, _ in victims]
    await eventually(
        lambda: all(m.exists() for m in markers), "every victim to reach its point", timeout=180
    )
    killed_at: dict[uuid.UUID, str] = {}
    for (proc, point), marker in zip(victims, markers, strict=True):
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        run_id, reached = marker.read_text().split()
        assert reached == point
        killed_at[uuid.UUID(run_id)] = point
    async with client.engine.begin() as conn:  # every victim is dead: its lease with it
        await conn.execute(delete(ShardOwners.table).where(ShardOwners.role == WORKER_ROLE))
    return killed_at, handles


async def finish_with_a_fresh_worker(
    engine: AsyncEngine, handles: Sequence[RunHandle[int]]
) -> list[int]:
    survivor = Runtime(
        engine,
        txflows.app,
        roles=Roles(decider=False, timer=False),
        poll_interval=0.2,
        # Its own attempts keep the default lease: one expired by a stall of a loaded
        # machine would be done again by a later attempt, off the test's account.
    )
    await survivor.start()
    try:
        return [await handle.result(timeout=120) for handle in handles]
    finally:
        await survivor.stop()


async def test_kill_9_anywhere_in_a_transactional_task_applies_it_exactly_once(
    engine: AsyncEngine,
    tx_client: Client,
    decider_and_sweeper: None,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    order = list(POINTS) * ROUNDS
    random.Random(15).shuffle(order)
    killed_at: dict[uuid.UUID, str] = {}
    outputs: dict[uuid.UUID, int] = {}
    shards = await tx_client.shards()

    async def start(keys: Sequence[int]) -> list[RunHandle[int]]:
        return [
            await tx_client.start(txflows.book_flow, n, run_id=shards.new_run_id(key))
            for n, key in enumerate(keys)
        ]

    for round_ in range(ROUNDS):
        points = order[round_ * len(POINTS) : (round_ + 1) * len(POINTS)]
        killed, handles = await kill_at_markers(
            tx_client, spawn, points, tmp_path / str(round_), start
        )
        killed_at.update(killed)
        finished = await finish_with_a_fresh_worker(engine, handles)
        outputs.update(zip((h.run_id for h in handles), finished, strict=True))
    assert sorted(killed_at.values()) == sorted(order) and set(killed_at) == set(outputs)
    for run_id, point in killed_at.items():
        rows = await ledger_rows(engine, run_id)
        # Killed before its commit, attempt 1 left nothing and attempt 2 did the work;
        # killed after it, attempt 1's commit stands and nothing ran again.
        attempt = 1 if point == txflows.AFTER_COMMIT else 2
        assert [(step, a) for _, step, a in rows] == [(1, attempt), (2, attempt)], point
        assert outputs[run_id] == rows[0][0]  # the output its committed body returned


async def test_kill_9_between_a_plain_tasks_write_and_its_report_applies_it_twice(
    engine: AsyncEngine,
    tx_client: Client,
    decider_and_sweeper: None,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    async def start(keys: Sequence[int]) -> list[RunHandle[int]]:
        shards = await tx_client.shards()
        return [
            await tx_client.start(txflows.book_plain_flow, 1, run_id=shards.new_run_id(key))
            for key in keys
        ]

    killed_at, handles = await kill_at_markers(
        tx_client, spawn, [txflows.PLAIN_AFTER_WRITE], tmp_path / "m", start
    )
    (output,) = await finish_with_a_fresh_worker(engine, handles)
    (run_id,) = killed_at
    rows = await ledger_rows(engine, run_id)
    assert [(step, attempt) for _, step, attempt in rows] == [(1, 1), (1, 2)]  # a duplicate
    assert output == rows[1][0]
