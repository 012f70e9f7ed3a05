"""Every locking statement the engine runs, forced through a recheck of a concurrently
updated row (EvalPlanQual), on the session's real server.

PostgreSQL 18.x frees partition-prune state still referenced after such a recheck in a
lock node whose input runs out, when an ``Append`` with run-time pruning inside a CTE or
subquery is rescanned afterwards (docs/operations.md, ``bench/pg18_epq_repro.py``). The
engine's statements are safe by their shape; a future edit that makes one unsafe should
crash here, in the normal suite, not in production under load.

How the recheck is forced: another transaction updates a row the statement will lock
and holds it. A plain ``FOR UPDATE`` (``runs.lock_many``) blocks on that row until the
updater commits. The ``SKIP LOCKED`` claims would skip a held row instead, so a test
row-level security policy makes the claim's scan wait when it reaches that row (on an
advisory lock the test holds, in a role the policy applies to); the updater commits
during the wait, and the lock node then finds its snapshot's version out of date: the
recheck. Each claim's ``limit`` exceeds the rows there are, so its lock node's input
runs out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest_asyncio
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.repositories import (
    concurrency,
    decide_queue,
    decider_take,
    decisions,
    outbox,
    queue_leases,
    rate_limits,
    report_write,
    run_events,
    runs,
    schedules,
    task_queue,
    tasks,
    timers,
)
from legato.engine.repositories.precompiled import execute_in
from legato.schema import (
    DEFAULT_SHARD_COUNT,
    CatchUp,
    ConcurrencySlots,
    NodeKind,
    Outbox,
    Schedules,
    Shards,
    TaskQueue,
    Tasks,
    TaskState,
    Timers,
    uuid7,
)
from tests.integration.seeded_rows import seed_attempts, seed_runs

T = TypeVar("T")
PAUSE_LOCK = 7243
SHARDS = Shards(DEFAULT_SHARD_COUNT)
KEY = 3  # every row of these tests lives in one shard key


@pytest_asyncio.fixture
async def paused_role(engine: AsyncEngine) -> AsyncIterator[str]:
    """A role subject to the row-level security policies ``_pause_scans_of`` adds (the
    test connects as a superuser, which bypasses them)."""
    role = f"epq_{uuid.uuid4().hex[:12]}"
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"CREATE ROLE {role}")
        await conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA legato TO {role}")
        await conn.exec_driver_sql(f"GRANT ALL ON ALL TABLES IN SCHEMA legato TO {role}")
        await conn.exec_driver_sql(f"""
CREATE FUNCTION legato.epq_pause(key text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('epq.pause', true) = key THEN
        PERFORM pg_advisory_xact_lock_shared({PAUSE_LOCK});
    END IF;
    RETURN true;
END $$""")
    yield role
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"DROP OWNED BY {role}")
        await conn.exec_driver_sql(f"DROP ROLE {role}")


async def _pause_scans_of(engine: AsyncEngine, table: str, key: str) -> None:
    """Sessions that ``SET LOCAL epq.pause`` to a row's ``key`` wait on ``PAUSE_LOCK`` when
    their scan reaches that row: after their snapshot, before their lock node locks it."""
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"ALTER TABLE legato.{table} ENABLE ROW LEVEL SECURITY")
        await conn.exec_driver_sql(
            f"CREATE POLICY epq_pause ON legato.{table} USING (legato.epq_pause({key}::text))"
        )


async def _waits(observer: AsyncConnection, pid: int, event: str) -> None:
    """Until backend ``pid`` waits on a lock of kind ``event`` (bounded: 30 s)."""
    for _ in range(3000):
        result = await observer.exec_driver_sql(
            f"SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}"
        )
        if result.scalar_one_or_none() == event:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the statement never waited on a {event} lock")


async def _with_recheck(
    engine: AsyncEngine,
    held_update: str,
    statement: Callable[[AsyncConnection], Awaitable[T]],
    *,
    paused: tuple[str, object] | None,
) -> T:
    """Run ``statement`` so that it locks a row ``held_update`` changed after its snapshot;
    ``paused`` (a role and a row key) makes its scan wait at that row for the commit."""
    observer = await engine.connect()
    updater = await engine.connect()
    victim = await engine.connect()
    try:
        if paused:
            await observer.exec_driver_sql(f"SELECT pg_advisory_lock({PAUSE_LOCK})")
        await observer.commit()
        await updater.begin()
        await updater.exec_driver_sql(held_update)
        await victim.begin()
        pid = int((await victim.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())
        if paused:
            role, key = paused
            await victim.exec_driver_sql(f"SET LOCAL ROLE {role}")
            await victim.exec_driver_sql(f"SET LOCAL epq.pause = '{key}'")
        running = asyncio.ensure_future(statement(victim))
        await _waits(observer, pid, "advisory" if paused else "transactionid")
        await updater.commit()
        if paused:
            await observer.exec_driver_sql(f"SELECT pg_advisory_unlock({PAUSE_LOCK})")
            await observer.commit()
        result = await asyncio.wait_for(running, 30)
        await victim.commit()
    finally:
        for conn in (victim, updater, observer):
            await conn.close()
    async with engine.connect() as conn:  # the server is still up
        assert (await conn.exec_driver_sql("SELECT 1")).scalar_one() == 1
    return result


async def _runs(engine: AsyncEngine, count: int) -> list[uuid.UUID]:
    async with engine.begin() as conn:
        return sorted(await seed_runs(conn, SHARDS, [KEY] * count, "epq"))


async def _queued_tasks(engine: AsyncEngine) -> list[uuid.UUID]:
    """Two available attempts of task ``work``, the first claimed first (priority 1 - n),
    with ``task_queue`` scans paused at a row's ``task_id``."""
    run_ids = await _runs(engine, 2)
    async with engine.begin() as conn:
        task_ids = await seed_attempts(
            conn, [(KEY, run_id) for run_id in run_ids], [{"n": 0}, {"n": 1}], priorities=[1, 0]
        )
    await _pause_scans_of(engine, "task_queue", "task_id")
    return task_ids


async def test_worker_claim(engine: AsyncEngine, paused_role: str) -> None:
    task_ids = await _queued_tasks(engine)
    claimed = await _with_recheck(
        engine,
        f"UPDATE legato.task_queue SET priority = priority WHERE task_id = '{task_ids[1]}'",
        lambda conn: task_queue.claim(
            conn, KEY, "default", ["work"], "epq-worker", 10, timedelta(seconds=30)
        ),
        paused=(paused_role, task_ids[1]),
    )
    assert sorted(c.task_id for c in claimed) == sorted(task_ids)


async def test_worker_claim_across_keys(engine: AsyncEngine, paused_role: str) -> None:
    """The single-node claim, whose lease finds the locked rows by the array of their
    task ids: the rechecked row is leased too."""
    task_ids = await _queued_tasks(engine)
    claimed = await _with_recheck(
        engine,
        f"UPDATE legato.task_queue SET priority = priority WHERE task_id = '{task_ids[1]}'",
        lambda conn: task_queue.claim_held(
            conn, [1, KEY, 9], "default", ["work"], "epq-worker", 10, timedelta(seconds=30)
        ),
        paused=(paused_role, task_ids[1]),
    )
    assert sorted(c.task_id for c in claimed) == sorted(task_ids)


async def test_limited_claim_candidates_then_lease(engine: AsyncEngine, paused_role: str) -> None:
    task_ids = await _queued_tasks(engine)

    async def lock_then_lease(conn: AsyncConnection) -> list[task_queue.Claimed]:
        candidates = await task_queue.lock_candidates(conn, KEY, "default", ["work"], 10)
        assert [c.task_id for c in candidates] == task_ids
        assert [c.input for c in candidates] == [{"n": 0}, {"n": 1}]
        keys = [(c.queue, c.task_id) for c in candidates]
        return await task_queue.lease(conn, KEY, keys, "epq-worker", timedelta(seconds=30))

    claimed = await _with_recheck(
        engine,
        f"UPDATE legato.task_queue SET priority = priority WHERE task_id = '{task_ids[1]}'",
        lock_then_lease,
        paused=(paused_role, task_ids[1]),
    )
    assert sorted(c.task_id for c in claimed) == sorted(task_ids)


async def test_lease_keeper_extension(engine: AsyncEngine, paused_role: str) -> None:
    """The single-node lease keeper's one statement over its attempts of every key
    (``paused_role`` for the scan pause ``_queued_tasks`` installs, unused here)."""
    task_ids = await _queued_tasks(engine)
    async with engine.begin() as conn:
        await task_queue.claim(
            conn, KEY, "default", ["work"], "epq-worker", 10, timedelta(seconds=30)
        )
    held = await _with_recheck(
        engine,
        f"UPDATE legato.task_queue SET priority = priority WHERE task_id = '{task_ids[1]}'",
        lambda conn: queue_leases.extend_held(
            conn, "epq-worker", [(KEY, "default", t) for t in task_ids], timedelta(minutes=5)
        ),
        paused=None,
    )
    assert held == set(task_ids)
    async with engine.connect() as conn:
        leases = await conn.execute(
            select(TaskQueue.lease_expires_at).where(TaskQueue.task_id.in_(task_ids))
        )
        assert all(e > datetime.now(UTC) + timedelta(minutes=4) for e in leases.scalars())


async def _decide_rows(engine: AsyncEngine) -> list[uuid.UUID]:
    run_ids = await _runs(engine, 2)
    past = datetime.now(UTC) - timedelta(seconds=10)
    async with engine.begin() as conn:
        for n, run_id in enumerate(run_ids):  # the first is the oldest, taken first
            await decide_queue.enqueue(
                conn, KEY, [run_id], "epq", available_at=past + timedelta(seconds=n)
            )
    await _pause_scans_of(engine, "decide_queue", "run_id")
    return run_ids


async def test_decider_take(engine: AsyncEngine, paused_role: str) -> None:
    run_ids = await _decide_rows(engine)
    taken = await _with_recheck(
        engine,
        f"UPDATE legato.decide_queue SET reason = 'changed' WHERE run_id = '{run_ids[1]}'",
        lambda conn: decide_queue.take(conn, KEY, 10),
        paused=(paused_role, run_ids[1]),
    )
    assert list(taken.failures) == run_ids


async def test_decider_take_of_chosen_runs(engine: AsyncEngine, paused_role: str) -> None:
    run_ids = await _decide_rows(engine)
    taken = await _with_recheck(
        engine,
        f"UPDATE legato.decide_queue SET reason = 'changed' WHERE run_id = '{run_ids[1]}'",
        lambda conn: decide_queue.take(conn, KEY, 10, run_ids=[*run_ids, uuid7()]),
        paused=(paused_role, run_ids[1]),
    )
    assert list(taken.failures) == run_ids


async def test_single_node_decider_take_call(engine: AsyncEngine, paused_role: str) -> None:
    """``decider_take_v2``'s take, rechecked inside the function."""
    run_ids = await _decide_rows(engine)
    taken = await _with_recheck(
        engine,
        f"UPDATE legato.decide_queue SET reason = 'changed' WHERE run_id = '{run_ids[1]}'",
        lambda conn: decider_take.take_and_load(conn, [KEY], 10),
        paused=(paused_role, run_ids[1]),
    )
    assert list(taken.failures) == run_ids
    assert [run.id for run, _ in taken.locked] == run_ids
    assert taken.loaded == {run_id: ([], []) for run_id in run_ids}


async def test_single_node_decider_take_call_run_lock(
    engine: AsyncEngine, paused_role: str
) -> None:
    """``decider_take_v2``'s lock of the taken runs, rechecked inside the function (the
    paused role is not used: the lock waits on the updater's row)."""
    run_ids = await _decide_rows(engine)
    taken = await _with_recheck(
        engine,
        f"UPDATE legato.runs SET cancel_requested_at = now() WHERE id = '{run_ids[1]}'",
        lambda conn: decider_take.take_and_load(conn, [KEY], 10),
        paused=None,
    )
    assert [run.id for run, _ in taken.locked] == run_ids
    # The lock read the committed update: the recheck happened.
    assert [run.cancel_requested for run, _ in taken.locked] == [False, True]


async def test_timer_take(engine: AsyncEngine, paused_role: str) -> None:
    run_ids = await _runs(engine, 2)
    now = datetime.now(UTC)
    first = max(now - timedelta(seconds=2), now.replace(hour=0, minute=0, second=0, microsecond=0))
    ids = [uuid7(), uuid7()]
    async with engine.begin() as conn:
        await conn.execute(
            insert(Timers.table),
            [
                {
                    "fire_at": first + timedelta(microseconds=n),
                    "id": ids[n],
                    "run_id": run_ids[n],
                    "task_id": uuid7(),
                    "attempt": 1,
                    "kind": "SLEEP",
                    "due_at": first,
                    "shard": KEY,
                }
                for n in range(2)
            ],
        )
    await _pause_scans_of(engine, "timers", "id")
    due = await _with_recheck(
        engine,
        f"UPDATE legato.timers SET attempt = attempt WHERE id = '{ids[1]}'",
        lambda conn: timers.take_due(conn, KEY, 10, datetime.now(UTC)),
        paused=(paused_role, ids[1]),
    )
    assert [timer.id for timer in due] == ids


async def test_decider_run_lock(engine: AsyncEngine) -> None:
    run_ids = await _runs(engine, 3)
    locked = await _with_recheck(
        engine,
        f"UPDATE legato.runs SET cancel_requested_at = now() WHERE id = '{run_ids[1]}'",
        lambda conn: runs.lock_many(conn, KEY, run_ids),
        paused=None,
    )
    assert [row.id for row, _ in locked] == run_ids
    # The lock read the committed update: the recheck happened.
    assert [row.cancel_requested for row, _ in locked] == [False, True, False]
    assert [seq for _, seq in locked] == [0, 0, 0]


async def test_relay_claim(engine: AsyncEngine, paused_role: str) -> None:
    run_ids = await _runs(engine, 2)
    past = datetime.now(UTC) - timedelta(seconds=10)
    async with engine.begin() as conn:
        endpoint = await outbox.add_endpoint(
            conn, "http://127.0.0.1:9/", "s", ["run.started"], None
        )
        result = await conn.execute(
            insert(Outbox.table).returning(Outbox.id),
            [
                {
                    "event_id": uuid7(),
                    "endpoint_id": endpoint,
                    "run_id": run_id,
                    "workflow_name": "epq",
                    "event_type": "run.started",
                    "next_attempt_at": past + timedelta(seconds=n),  # the first is claimed first
                    "shard": KEY,
                }
                for n, run_id in enumerate(run_ids)
            ],
        )
        ids = sorted(result.scalars().all())
    await _pause_scans_of(engine, "outbox", "id")
    claimed = await _with_recheck(
        engine,
        f"UPDATE legato.outbox SET last_error = 'changed' WHERE id = {ids[1]}",
        lambda conn: outbox.claim(conn, KEY, 10, timedelta(seconds=30)),
        paused=(paused_role, ids[1]),
    )
    assert [d.id for d in claimed] == ids
    assert [d.attempts for d in claimed] == [1, 1]
    # The claim read the committed update: the recheck happened.
    assert [d.last_error for d in claimed] == [None, "changed"]


async def test_concurrency_slots_lock(engine: AsyncEngine, paused_role: str) -> None:
    async with engine.begin() as conn:
        await concurrency.ensure(conn, {("epq", "k"): 2})
    await _pause_scans_of(engine, "concurrency_slots", "(limit_name || '/' || slot)")
    free = await _with_recheck(
        engine,
        "UPDATE legato.concurrency_slots SET holder_owner = NULL WHERE slot = 1",
        lambda conn: concurrency.lock_free(conn, {("epq", "k"): 3}),
        paused=(paused_role, "epq/1"),
    )
    assert free == {("epq", "k"): [0, 1]}


async def test_concurrency_slots_prune(engine: AsyncEngine, paused_role: str) -> None:
    idle_since = datetime.now(UTC) - concurrency.IDLE_SLOTS_KEPT - timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(
            insert(ConcurrencySlots.table),
            [
                {"limit_name": "epq", "key": "k", "slot": n, "expires_at": idle_since}
                for n in (0, 1)
            ],
        )
    await _pause_scans_of(engine, "concurrency_slots", "(limit_name || '/' || slot)")
    pruned = await _with_recheck(
        engine,
        "UPDATE legato.concurrency_slots SET holder_owner = NULL WHERE slot = 1",
        lambda conn: concurrency.prune(conn, 10),
        paused=(paused_role, "epq/1"),
    )
    assert pruned == 2


async def test_rate_buckets_lock(engine: AsyncEngine, paused_role: str) -> None:
    async with engine.begin() as conn:
        await rate_limits.ensure(conn, {("epq", "a"): 5, ("epq", "b"): 5})
    await _pause_scans_of(engine, "rate_buckets", "key")
    buckets = await _with_recheck(
        engine,
        "UPDATE legato.rate_buckets SET tokens = 4 WHERE key = 'b'",
        lambda conn: rate_limits.lock(conn, [("epq", "a"), ("epq", "b"), ("epq", "c")]),
        paused=(paused_role, "b"),
    )
    # The lock read the committed update: the recheck happened.
    assert {key: bucket.tokens for key, bucket in buckets.items()} == {
        ("epq", "a"): 5.0,
        ("epq", "b"): 4.0,
    }


async def _schedules(engine: AsyncEngine) -> list[str]:
    past = datetime.now(UTC) - timedelta(seconds=10)
    names = ["epq-a", "epq-b"]
    async with engine.begin() as conn:
        await conn.execute(
            insert(Schedules.table),
            [
                {
                    "name": name,
                    "workflow_name": "epq",
                    "interval_seconds": 60.0,
                    "timezone": "UTC",
                    "input": None,
                    "catch_up": CatchUp.SKIP,
                    "max_catch_up": 1,
                    "grace_seconds": 60.0,
                    "next_fire_at": past + timedelta(seconds=n),  # the first is taken first
                }
                for n, name in enumerate(names)
            ],
        )
    return names


async def test_schedule_take(engine: AsyncEngine, paused_role: str) -> None:
    names = await _schedules(engine)
    await _pause_scans_of(engine, "schedules", "name")
    due = await _with_recheck(
        engine,
        "UPDATE legato.schedules SET last_tick_at = now() WHERE name = 'epq-b'",
        lambda conn: schedules.take_due(conn, datetime.now(UTC), 10),
        paused=(paused_role, "epq-b"),
    )
    assert [s.schedule.name for s in due] == names


async def test_schedule_row_lock(engine: AsyncEngine) -> None:
    await _schedules(engine)
    locked = await _with_recheck(
        engine,
        "UPDATE legato.schedules SET paused = true WHERE name = 'epq-b'",
        lambda conn: schedules.get(conn, "epq-b", lock=True),
        paused=None,
    )
    assert locked is not None
    assert locked.paused


async def _attempt(engine: AsyncEngine) -> tuple[uuid.UUID, uuid.UUID]:
    """A run with one QUEUED attempt of ``work`` and its queue row."""
    (run_id,) = await _runs(engine, 1)
    task_id = uuid7()
    async with engine.begin() as conn:
        await conn.execute(
            insert(Tasks.table).values(
                run_id=run_id,
                id=task_id,
                node_id="n",
                kind=NodeKind.TASK,
                state=TaskState.QUEUED,
                task_name="work",
                queue="default",
                shard=KEY,
            )
        )
        await task_queue.enqueue(
            conn,
            KEY,
            [task_queue.NewQueueRow("default", task_id, run_id, 1, "work", 0, datetime.now(UTC))],
        )
    return run_id, task_id


async def test_decision_removes_a_cancelled_queue_row(engine: AsyncEngine) -> None:
    _, task_id = await _attempt(engine)
    await _with_recheck(
        engine,
        f"UPDATE legato.task_queue SET priority = 5 WHERE task_id = '{task_id}'",
        lambda conn: queue_leases.remove(conn, KEY, [("default", task_id)]),
        paused=None,
    )
    async with engine.connect() as conn:
        assert (await conn.execute(select(TaskQueue.task_id))).all() == []


async def test_decision_writes(engine: AsyncEngine) -> None:
    run_id, task_id = await _attempt(engine)
    now = datetime.now(UTC)
    new_id = uuid7()
    writes = decisions.Writes(
        creates=[
            tasks.NewTask(
                run_id,
                new_id,
                "m",
                0,
                1,
                NodeKind.TASK,
                TaskState.QUEUED,
                "work",
                "default",
                None,
                None,
                None,
                None,
                now,
                now,
                None,
                False,
            )
        ],
        enqueues=[task_queue.NewQueueRow("default", new_id, run_id, 1, "work", 0, now)],
        timers=[],
        consumed=[],
        moves=[tasks.Transition(run_id, task_id, 1, TaskState.CANCELLED, observed=True)],
        observed=[],
        events=[run_events.NewEvent(run_id, 1, "task_cancelled", "n", 0, 1, None)],
        lifecycle=[],
        finishes=[],
    )
    applied = await _with_recheck(
        engine,
        f"UPDATE legato.tasks SET started_at = now() WHERE id = '{task_id}'",
        lambda conn: decisions.write(conn, KEY, writes, now),
        paused=None,
    )
    assert applied == {task_id}
    async with engine.connect() as conn:
        rows = {
            row[0]: row[1:]
            for row in await conn.execute(select(Tasks.id, Tasks.state, Tasks.started_at))
        }
    # The move applied to the committed version of the row: the recheck happened.
    assert rows[task_id][0] is TaskState.CANCELLED and rows[task_id][1] is not None
    assert rows[new_id][0] is TaskState.QUEUED and rows[new_id][1] is None


async def test_report_write(engine: AsyncEngine) -> None:
    """A worker's report flush in one statement (``report_write.statement``, committed on
    its own in production): its task update rechecked against the committed row."""
    run_id, task_id = await _attempt(engine)
    async with engine.begin() as conn:
        await conn.execute(
            update(Tasks.table).where(Tasks.id == task_id).values(state=TaskState.RUNNING)
        )
    move = tasks.Transition(run_id, task_id, None, TaskState.COMPLETED, output=7)
    params = report_write.statement_params(
        SHARDS.count, [(KEY, "default", task_id)], [move], [TaskState.RUNNING], "test"
    )
    applied = await _with_recheck(
        engine,
        f"UPDATE legato.tasks SET started_at = now() WHERE id = '{task_id}'",
        lambda conn: execute_in(conn, report_write.statement(), params),
        paused=None,
    )
    assert [row[0] for row in applied] == [task_id]
    async with engine.connect() as conn:
        state, started_at = (
            await conn.execute(select(Tasks.state, Tasks.started_at).where(Tasks.id == task_id))
        ).one()
        queued = (await conn.execute(select(TaskQueue.task_id))).all()
    # The move applied to the committed version of the row: the recheck happened.
    assert state is TaskState.COMPLETED and started_at is not None
    assert queued == []
