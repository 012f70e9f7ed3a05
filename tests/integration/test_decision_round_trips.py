"""How many round trips one decision costs: a latency a user waits on (signal -> next
task) expressed as a deterministic count, so a regression shows up without a timing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, TaskContext, task, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import notify, tasks
from legato.schema import (
    DEFAULT_SHARD_COUNT,
    RunStatus,
    Shards,
    Signals,
    TaskQueue,
    Tasks,
    TaskState,
)
from tests.helpers import engine_events, eventually


@task()
async def greet(ctx: TaskContext, name: str) -> str:
    return f"hello {name}"


@workflow("woken")
def woken(flow: Flow[str]) -> Node[str]:
    name = flow.wait_for_event("go", str)
    return flow.run(greet, name)


app = App(workflows=[woken])
shards = Shards(DEFAULT_SHARD_COUNT)


@contextmanager
def round_trips(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every round trip ``engine`` makes inside the block: each statement as sent, and
    ``BEGIN`` / ``COMMIT`` (asyncpg sends them itself, outside the cursor events)."""
    sent: list[str] = []

    def statement(_conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        sent.append(text)

    def begin(_conn: Any) -> None:
        sent.append("BEGIN")

    def commit(_conn: Any) -> None:
        sent.append("COMMIT")

    with engine_events(
        engine, ("before_cursor_execute", statement), ("begin", begin), ("commit", commit)
    ):
        yield sent


async def test_a_wake_decision_is_four_round_trips(engine: AsyncEngine) -> None:
    """BEGIN, the take with its lock and snapshot (one call of ``decider_take_v2``), the
    writes, COMMIT: the signalled run's wait resolves, its next task is enqueued, and
    the workers hear of it. The signal's NOTIFY names the run's key, so the tick takes
    from that key alone."""
    decider = DeciderLoop(engine, shards=shards, poll_interval=600)
    heard: list[str] = []
    listener = await engine.connect()
    raw = (await listener.get_raw_connection()).driver_connection
    assert raw is not None
    await raw.add_listener(notify.tasks_channel("legato"), lambda *args: heard.append(args[2]))
    async with Client(engine, app=app) as client:
        handle = await client.start(woken, "x")
        assert await decider.tick() is False  # the first decision opens the wait
        await client.signal(handle.run_id, "go", "ada")
    decider.decide_now([shards.of_run(handle.run_id)])  # what the decide NOTIFY's payload does
    assert not heard  # opening a wait enqueues nothing, and NOTIFYs no worker
    # The statements are prepared on the pool's connection by an earlier decision, as
    # in a running decider; the count is what a warm decision sends.
    with round_trips(engine) as sent:
        await decider.tick()
    async with engine.connect() as conn:
        states = dict(
            (
                await conn.execute(
                    select(Tasks.node_id, Tasks.state).where(Tasks.run_id == handle.run_id)
                )
            ).all()
        )
        queued = (await conn.execute(select(TaskQueue.task_name))).scalars().all()
        consumed = (await conn.execute(select(Signals.consumed_at))).scalars().all()
    assert states == {"go": TaskState.COMPLETED, "greet": TaskState.QUEUED}
    assert queued == ["greet"] and all(consumed)
    decision, after = sent[: sent.index("COMMIT") + 1], sent[sent.index("COMMIT") + 1 :]
    assert len(decision) == 4, decision
    assert decision[0] == "BEGIN" and "decider_take_v2" in decision[1]
    # Then, nothing more to do, the look before sleeping: one autocommit statement (the
    # "BEGIN" SQLAlchemy's event reports sends nothing on an autocommit connection).
    assert [step for step in after if step != "BEGIN"] == [after[-1]], after
    assert "decider_sleeps_v2" in after[-1]
    await eventually(lambda: bool(heard), "the workers' NOTIFY")
    await listener.close()


@task()
async def names(ctx: TaskContext, name: str) -> list[str]:
    return [name]


@workflow("split")
def split(flow: Flow[str]) -> Node[list[str]]:
    listed = flow.run(names, flow.input)
    flow.run(greet, flow.input, after=[listed])
    return flow.map(greet, listed)


async def test_an_attempt_started_and_cancelled_in_one_decision(engine: AsyncEngine) -> None:
    """The writes' one statement does not see its own inserts: an attempt the decision
    starts and then cancels (a sibling failed in the same pass) is stored cancelled,
    with no queue row, instead of aborting the decision."""
    decider = DeciderLoop(engine, shards=shards)
    async with Client(engine, app=App(workflows=[split])) as client:
        handle = await client.start(split, "x")
        await decider.tick()
        async with engine.begin() as conn:
            (listed,) = (await conn.execute(select(Tasks.id))).scalars().all()
            await conn.execute(delete(TaskQueue.table))
            # Not a list: the map fails as it starts, after the greeting has started.
            await apply_reports(
                conn,
                [
                    Report(
                        tasks.Transition(handle.run_id, listed, 1, TaskState.COMPLETED, "x"),
                        shards.of_run(handle.run_id),
                    )
                ],
                "test",
            )
        await decider.tick()
        run = await client.get_run(handle.run_id)
    async with engine.connect() as conn:
        queued = (await conn.execute(select(TaskQueue.task_id))).all()
    assert run.run.status is RunStatus.FAILED
    assert {(t.node_id, t.state) for t in run.tasks} == {
        ("names", TaskState.COMPLETED),
        ("greet", TaskState.CANCELLED),
        ("map-greet", TaskState.FAILED),
    }
    assert queued == []


async def test_an_emit_is_one_write_per_key_whatever_the_number_of_runs(
    engine: AsyncEngine,
) -> None:
    """BEGIN, the open waits (a fan-out across keys), one write per shard key of the
    runs reached, COMMIT: a run that already holds an unconsumed signal of the event is
    skipped, the others are signalled."""
    decider = DeciderLoop(engine, shards=shards)
    async with Client(engine, app=app) as client:
        handles = [await client.start(woken, f"run {i}") for i in range(4)]
        await decider.tick()  # every run opens its wait
        await client.signal(handles[0].run_id, "go", "early")
        with round_trips(engine) as sent:
            delivered = await client.emit("go", "ada")
        assert delivered == sorted(handle.run_id for handle in handles[1:])
        keys = {shards.of_run(handle.run_id) for handle in handles[1:]}
        assert len(sent) == 3 + len(keys), sent
        assert await client.emit("go", "again") == []
    async with engine.connect() as conn:
        payloads = (await conn.execute(select(Signals.run_id, Signals.payload))).all()
    assert sorted(payloads) == sorted(
        [(handles[0].run_id, "early")] + [(handle.run_id, "ada") for handle in handles[1:]]
    )
