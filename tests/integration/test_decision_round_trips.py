"""How many round trips one decision costs: a latency a user waits on (signal -> next
task) expressed as a deterministic count, so a regression shows up without a timing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, TaskContext, task, workflow
from legato.engine.decider_loop import DeciderLoop
from legato.schema import Signals, TaskQueue, Tasks, TaskState


@task()
async def greet(ctx: TaskContext, name: str) -> str:
    return f"hello {name}"


@workflow("woken")
def woken(flow: Flow[str]) -> Node[str]:
    name = flow.wait_for_event("go", str)
    return flow.run(greet, name)


app = App(workflows=[woken])


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

    hooks = (("before_cursor_execute", statement), ("begin", begin), ("commit", commit))
    for name, hook in hooks:
        event.listen(engine.sync_engine, name, hook)
    try:
        yield sent
    finally:
        for name, hook in hooks:
            event.remove(engine.sync_engine, name, hook)


async def test_a_wake_decision_is_four_round_trips(engine: AsyncEngine) -> None:
    decider = DeciderLoop(engine)
    async with Client(engine, app=app) as client:
        handle = await client.start(woken, "x")
        assert await decider.tick() is False  # the first decision opens the wait
        await client.signal(handle.run_id, "go", "ada")
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
    assert len(sent) == 10, sent
