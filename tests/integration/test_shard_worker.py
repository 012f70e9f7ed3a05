"""The worker side of shard keys, on the real server: a worker and a lease sweeper take
only from the keys they hold, and a report flush writes one statement per key and kind.

Rows are seeded directly (runs, tasks, queue rows of chosen keys), so each test drives
one loop with nothing else running."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Flow, Node, TaskContext, task, workflow
from legato.db.server_check import check_database
from legato.engine.loops.lease_sweeper import LeaseSweeper
from legato.engine.loops.worker import Worker
from legato.engine.loops.worker_attempts import report_of
from legato.engine.loops.worker_claims import WorkerClaims
from legato.engine.repositories import notify, task_queue
from legato.schema import (
    DecideQueue,
    Shards,
    TaskQueue,
    Tasks,
    TaskState,
)
from tests.helpers import eventually
from tests.integration.seeded_rows import seed_attempts, seed_runs


@task()
async def work(ctx: TaskContext, n: int) -> int:
    return n


@workflow("keyed")
def keyed(flow: Flow[int]) -> Node[int]:
    return flow.run(work, flow.input)


app = App(workflows=[keyed])


class Held:
    """A fixed set of held keys."""

    def __init__(self, keys: Sequence[int]) -> None:
        self.keys = tuple(keys)

    def held(self) -> Sequence[int]:
        return self.keys


async def _shards(engine: AsyncEngine) -> Shards:
    async with engine.connect() as conn:
        return await check_database(conn, "legato")


async def _queued(engine: AsyncEngine, shards: Shards, keys: Sequence[int]) -> dict[int, uuid.UUID]:
    """One run per key in ``keys`` with one queued attempt of ``work``; task id by key."""
    async with engine.begin() as conn:
        run_ids = await seed_runs(conn, shards, keys, "keyed")
        runs = list(zip(keys, run_ids, strict=True))
        task_ids = await seed_attempts(conn, runs, [[key] for key in keys])
    return dict(zip(keys, task_ids, strict=True))


async def _states(engine: AsyncEngine) -> dict[uuid.UUID, TaskState]:
    async with engine.connect() as conn:
        return dict((await conn.execute(select(Tasks.id, Tasks.state))).all())


async def _queue_rows(engine: AsyncEngine) -> dict[uuid.UUID, str | None]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(TaskQueue.task_id, TaskQueue.lease_owner))
        return dict(rows.all())


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every statement ``engine`` sends inside the block."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        sent.append(" ".join(text.split()))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


@pytest.mark.parametrize("distributed", [True, False], ids=["distributed", "single-node"])
async def test_a_worker_holding_key_0_never_claims_a_task_of_key_1(
    engine: AsyncEngine, distributed: bool
) -> None:
    """One claim per key, or, on one PostgreSQL, one claim spanning the held keys: never
    an attempt of a key not held."""
    shards = replace(await _shards(engine), distributed=distributed)
    task_ids = await _queued(engine, shards, [0, 1])
    worker = Worker(
        engine, app, shards=shards, held=Held([0]), poll_interval=0.05, worker_id="holds-0"
    )
    running = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: _done(engine, task_ids[0]), "the key-0 attempt to be run and reported"
        )
        # A wake-up naming key 1, and one naming no key, claim nothing of key 1 either.
        worker._on_tasks_payload("1")
        worker._on_tasks_payload("")
        worker._on_tasks_payload("not a key")
        await asyncio.sleep(0.3)  # several polls
    finally:
        worker.stop()
        await running
    assert (await _states(engine))[task_ids[1]] is TaskState.QUEUED
    assert (await _queue_rows(engine)) == {task_ids[1]: None}  # never leased


async def _done(engine: AsyncEngine, task_id: uuid.UUID) -> bool:
    return (await _states(engine))[task_id] is TaskState.COMPLETED


@pytest.mark.parametrize("distributed", [True, False], ids=["distributed", "single-node"])
async def test_a_wake_for_one_key_claims_every_held_key_on_one_postgresql(
    engine: AsyncEngine, distributed: bool
) -> None:
    """On one PostgreSQL the claim a wake-up for key 5 sends spans every held key, so
    attempts whose NOTIFY has not arrived yet are claimed with it; in the distributed
    layout it claims from key 5 alone."""
    shards = replace(await _shards(engine), distributed=distributed)
    worker = Worker(
        engine, app, shards=shards, held=Held([2, 5, 9]), poll_interval=600, worker_id="w"
    )
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: not worker._dirty, "the first poll of every held key")
        task_ids = await _queued(engine, shards, [2, 5, 9])
        with statements(engine) as sent:
            worker._on_tasks_payload("5")
            await eventually(lambda: _done(engine, task_ids[5]), "the key-5 attempt to run")
            claims = [text for text in sent if "UPDATE legato.task_queue" in text]
        states = await _states(engine)
    finally:
        worker.stop()
        await running
    assert len(claims) == 1, claims
    spanned = {task_ids[2], task_ids[9]}
    if distributed:
        assert {states[task_id] for task_id in spanned} == {TaskState.QUEUED}
    else:
        assert {states[task_id] for task_id in spanned} <= {TaskState.RUNNING, TaskState.COMPLETED}


def test_a_notify_payload_marks_its_key_or_every_held_key() -> None:
    assert notify.shards_of("3", [1, 3, 5]) == (3,)
    assert notify.shards_of("4", [1, 3, 5]) == ()  # not held: nothing to take
    assert notify.shards_of("", [1, 3, 5]) == [1, 3, 5]
    assert notify.shards_of("x7", [1, 3, 5]) == [1, 3, 5]


@pytest.mark.parametrize("distributed", [True, False], ids=["distributed", "single-node"])
async def test_a_report_flush_of_three_keys_is_one_statement_per_key_and_kind_or_one_in_all(
    engine: AsyncEngine, distributed: bool
) -> None:
    """Distributed: one statement per key and kind; on one PostgreSQL one statement that
    commits on its own spans the three keys and every kind, each row written in its own
    run's key."""
    shards = replace(await _shards(engine), distributed=distributed)
    keys = [2, 5, 9]
    task_ids = await _queued(engine, shards, keys)
    worker = Worker(engine, app, shards=shards, held=Held(keys), worker_id="reporter")
    claimed: list[task_queue.Claimed] = []
    async with engine.connect() as conn:
        for key in keys:
            claimed += await task_queue.claim(
                conn, key, "default", ["work"], "reporter", 10, timedelta(seconds=30)
            )
        await conn.commit()
    assert sorted(c.shard for c in claimed) == keys
    worker._reports = [report_of(c, TaskState.COMPLETED, c.shard, None) for c in claimed]
    with statements(engine) as sent:
        assert await worker.flush()
    kinds = {
        "decide_queue upserts": "INSERT INTO legato.decide_queue",
        "queue row deletes": "DELETE FROM legato.task_queue",
        "task updates": "UPDATE legato.tasks",
    }
    if distributed:
        for kind, prefix in kinds.items():
            matching = [s for s in sent if prefix in s]
            assert len(matching) == len(keys), f"{kind}: {matching}"
        assert len(sent) == len(keys) * len(kinds), sent
    else:
        # Not through SQLAlchemy's execute (no BEGIN either): on the driver path.
        assert sent == []
        (one,) = worker._driver.compiled()
        for kind, prefix in kinds.items():
            assert one.count(prefix) == 1, f"{kind}: {one}"
    states = await _states(engine)
    assert all(states[task_ids[key]] is TaskState.COMPLETED for key in keys)
    assert await _queue_rows(engine) == {}
    async with engine.connect() as conn:
        queued = (await conn.execute(select(DecideQueue.shard, DecideQueue.run_id))).all()
    assert sorted(shard for shard, _ in queued) == keys
    assert all(shards.of_run(run_id) == shard for shard, run_id in queued)


async def test_the_sweeper_frees_an_expired_lease_only_in_held_keys(engine: AsyncEngine) -> None:
    shards = await _shards(engine)
    task_ids = await _queued(engine, shards, [0, 1])
    async with engine.connect() as conn:
        for key in (0, 1):
            await task_queue.claim(conn, key, "default", ["work"], "gone", 10, timedelta(0))
        # The lease passed a while ago: its worker is gone.
        await conn.execute(
            update(TaskQueue.table).values(
                lease_expires_at=datetime.now(UTC) - timedelta(minutes=1)
            )
        )
        await conn.commit()
    sweeper = LeaseSweeper(engine, shards=shards, held=Held([1]), poll_interval=0.05)
    while await sweeper.tick():
        pass
    assert sweeper.swept == 1
    states = await _states(engine)
    assert states[task_ids[1]] is TaskState.TIMED_OUT
    assert states[task_ids[0]] is TaskState.RUNNING  # key 0 is not this sweeper's
    assert await _queue_rows(engine) == {task_ids[0]: "gone"}


async def _give_back(engine: AsyncEngine, task_id: uuid.UUID) -> None:
    """End ``task_id``'s lease as a lease given back does (the row keeps its place in the
    queue), stamped a minute ago: a row that appears below a claim's floor."""
    async with engine.begin() as conn:
        await conn.execute(
            update(TaskQueue.table)
            .where(TaskQueue.task_id == task_id)
            .values(
                lease_owner=None,
                lease_expires_at=None,
                available_at=datetime.now(UTC) - timedelta(minutes=1),
            )
        )


async def _lease_to_another(engine: AsyncEngine, task_id: uuid.UUID) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(TaskQueue.table)
            .where(TaskQueue.task_id == task_id)
            .values(lease_owner="another", lease_expires_at=datetime.now(UTC) + timedelta(hours=1))
        )


@pytest.mark.parametrize("distributed", [True, False], ids=["distributed", "single-node"])
async def test_a_claim_starts_from_the_floor_its_last_claim_with_slots_left_free_set(
    engine: AsyncEngine, distributed: bool
) -> None:
    """After a claim that filled fewer slots than it had (so it took every row it could
    see), the worker's next claims of that queue start a second before the oldest row it
    returned: the dead entries a held snapshot keeps below are skipped on the index. A
    row that appears below the floor (a lease given back) waits for the claim from the
    oldest row the worker makes once per poll interval (the next test)."""
    shards = replace(await _shards(engine), distributed=distributed)
    keys = [2] if distributed else [2, 5]
    await _queued(engine, shards, [2, 2])
    given_back, taken = sorted(await _queue_rows(engine))
    await _lease_to_another(engine, given_back)
    claims = WorkerClaims(engine, app, ["default"], shards, "floored", timedelta(minutes=1), 600)
    assert [c.task_id for c in await claims.claim(keys, "default", 10)] == [taken]
    await _give_back(engine, given_back)
    assert await claims.claim(keys, "default", 10) == []  # below the floor
    # The same keys in another order (the dirty key first) share the floor.
    assert await claims.claim(keys[::-1], "default", 10) == []
    fresh = WorkerClaims(engine, app, ["default"], shards, "fresh", timedelta(minutes=1), 600)
    assert [c.task_id for c in await fresh.claim(keys, "default", 10)] == [given_back]


async def test_a_claim_that_fills_every_slot_sets_no_floor(engine: AsyncEngine) -> None:
    """A full claim took the best rows, highest priority first: lower-priority rows
    older than those may wait, so it moves no floor, and the next claim still sees a row
    stamped a minute ago."""
    shards = await _shards(engine)
    await _queued(engine, shards, [2, 2])
    first, second = sorted(await _queue_rows(engine))
    claims = WorkerClaims(engine, app, ["default"], shards, "full", timedelta(minutes=1), 600)
    assert [c.task_id for c in await claims.claim([2], "default", 1)] == [first]
    await _give_back(engine, second)
    assert [c.task_id for c in await claims.claim([2], "default", 1)] == [second]


async def test_a_lease_given_back_below_the_floor_is_claimed_within_a_poll_interval(
    engine: AsyncEngine,
) -> None:
    """The worker's claim from the oldest row, once per poll interval, takes what appeared
    below its floor."""
    shards = await _shards(engine)
    await _queued(engine, shards, [2, 2])
    given_back, taken = sorted(await _queue_rows(engine))
    await _lease_to_another(engine, given_back)
    worker = Worker(engine, app, shards=shards, held=Held([2]), poll_interval=0.2)
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: _done(engine, taken), "the first attempt to be run")
        await _give_back(engine, given_back)
        await eventually(lambda: _done(engine, given_back), "the given-back attempt to be run")
    finally:
        worker.stop()
        await running
