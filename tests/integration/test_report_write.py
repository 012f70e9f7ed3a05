"""A worker's report flush as one statement committed on its own
(``repositories.report_write``): it locks the run's decide row before the attempt's
queue and task rows, as the transaction of three statements did, and a decision it
races wins: the report waits for it, then applies only what is still true, and the run
is queued to be decided again."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.repositories import decide_queue, report_write, tasks
from legato.engine.transport.driver import DriverStatements
from legato.schema import (
    DEFAULT_SHARD_COUNT,
    DecideQueue,
    Shards,
    TaskQueue,
    Tasks,
    TaskState,
)
from tests.integration.seeded_rows import seed_attempts, seed_runs

SHARDS = Shards(DEFAULT_SHARD_COUNT)
KEY = 5
LOCK_NOT_AVAILABLE = "55P03"  # FOR UPDATE NOWAIT on a row another session holds


async def _running_attempt(engine: AsyncEngine) -> tuple[uuid.UUID, uuid.UUID]:
    """A run with one RUNNING attempt of ``work``, its queue row leased to ``w``."""
    async with engine.begin() as conn:
        (run_id,) = await seed_runs(conn, SHARDS, [KEY], "reported")
        (task_id,) = await seed_attempts(conn, [(KEY, run_id)], [None], leased_to="w")
    return run_id, task_id


async def _report_waiting_on(
    engine: AsyncEngine, decision: AsyncConnection, run_id: uuid.UUID, task_id: uuid.UUID
) -> tuple[asyncio.Future[dict[uuid.UUID, str | None]], int]:
    """The attempt's completion reported while ``decision`` holds the run's decide row;
    returns once the report waits on that row, with the report's backend pid."""
    await decide_queue.enqueue(decision, KEY, [run_id], "deciding")
    pids: list[int] = []
    move = tasks.Transition(run_id, task_id, None, TaskState.COMPLETED, output=7)
    writing = asyncio.ensure_future(
        report_write.write(
            DriverStatements(engine),
            SHARDS.count,
            [(KEY, "default", task_id)],
            [move],
            [TaskState.RUNNING],
            "task finished",
            lambda driver: pids.append(driver.get_server_pid()),
        )
    )
    async with engine.connect() as observer:
        for _ in range(3000):
            if pids:
                result = await observer.exec_driver_sql(
                    f"SELECT wait_event_type FROM pg_stat_activity WHERE pid = {pids[-1]}"
                )
                if result.scalar_one_or_none() == "Lock":
                    return writing, pids[-1]
            await asyncio.sleep(0.01)
    raise AssertionError("the report never waited on the decide row")


async def _locked_elsewhere(engine: AsyncEngine, task_id: uuid.UUID) -> list[str]:
    """Which of the attempt's queue and task rows another session cannot lock now."""
    locked = []
    for name, column in (("queue row", TaskQueue.task_id), ("task row", Tasks.id)):
        async with engine.connect() as probe:
            try:
                await probe.execute(
                    select(column).where(column == task_id).with_for_update(nowait=True)
                )
            except DBAPIError as error:
                if getattr(error.orig, "pgcode", None) != LOCK_NOT_AVAILABLE:
                    raise
                locked.append(name)
            await probe.rollback()
    return locked


async def test_a_report_waiting_on_a_decision_holds_no_queue_or_task_row(
    engine: AsyncEngine,
) -> None:
    run_id, task_id = await _running_attempt(engine)
    async with engine.connect() as decision:
        writing, _ = await _report_waiting_on(engine, decision, run_id, task_id)
        # The decision could still lock them (it locks its run's rows after the decide
        # row): no deadlock.
        assert await _locked_elsewhere(engine, task_id) == []
        await decision.commit()
        assert await asyncio.wait_for(writing, 30) == {task_id: "default"}
    async with engine.connect() as conn:
        state = await conn.scalar(select(Tasks.state).where(Tasks.id == task_id))
        queued = (await conn.execute(select(TaskQueue.task_id))).all()
        decide = (await conn.execute(select(DecideQueue.run_id, DecideQueue.reason))).all()
    assert state is TaskState.COMPLETED
    assert queued == []
    assert decide == [(run_id, "task finished")]


@pytest.mark.parametrize("outcome", [TaskState.CANCELLED, TaskState.TIMED_OUT])
async def test_a_report_racing_a_decision_that_ended_the_attempt_changes_nothing_of_it(
    engine: AsyncEngine, outcome: TaskState
) -> None:
    """The decision ends the attempt while the report waits for its decide row: the
    report's fence rechecks the committed row and leaves it as the decision wrote it,
    and the run is queued again (no lost wake-up)."""
    run_id, task_id = await _running_attempt(engine)
    async with engine.connect() as decision:
        writing, _ = await _report_waiting_on(engine, decision, run_id, task_id)
        await decision.execute(
            update(Tasks.table).where(Tasks.id == task_id).values(state=outcome, lease_owner=None)
        )
        await decision.commit()
        assert await asyncio.wait_for(writing, 30) == {}
    async with engine.connect() as conn:
        state = await conn.scalar(select(Tasks.state).where(Tasks.id == task_id))
        decide = (await conn.execute(select(DecideQueue.run_id))).all()
    assert state is outcome
    assert decide == [(run_id,)]
