"""Which decisions commit without waiting for their WAL flush: those that queue attempts
for a worker's claim, a commit that does wait; never one that finishes a run or hands
attempts to its own process's worker (docs/design.md, "A decision commits without
waiting for its flush")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, Roles, RunStatus, Runtime, TaskContext, task, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.schema import DEFAULT_SHARD_COUNT, Shards, WorkflowDefinitions
from tests.helpers import engine_events, eventually


@task()
async def greet(ctx: TaskContext, name: str) -> str:
    return f"hello {name}"


@workflow("greeting")
def greeting(flow: Flow[str]) -> Node[str]:
    return flow.run(greet, flow.input)


@workflow("woken")
def woken(flow: Flow[str]) -> Node[str]:
    return flow.run(greet, flow.wait_for_event("go", str))


@workflow("broken")
def broken(flow: Flow[str]) -> Node[str]:
    return flow.run(greet, flow.input)


app = App(workflows=[greeting, woken, broken])
shards = Shards(DEFAULT_SHARD_COUNT)


@contextmanager
def decision_commits(engine: AsyncEngine) -> Iterator[list[str]]:
    """The ``synchronous_commit`` of each transaction of ``engine`` that wrote a decision
    (its one statement inserts ``inserted_tasks``), read as it commits."""
    deciding: set[int] = set()
    settings: list[str] = []

    def statement(conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        if "inserted_tasks" in text:
            deciding.add(id(conn))

    def commit(conn: Any) -> None:
        if id(conn) in deciding:
            deciding.discard(id(conn))
            shown = conn.exec_driver_sql("SELECT current_setting('synchronous_commit')")
            settings.append(shown.scalar_one())

    with engine_events(engine, ("before_cursor_execute", statement), ("commit", commit)):
        yield settings


async def test_a_decision_that_queues_work_does_not_wait_for_its_flush(
    engine: AsyncEngine,
) -> None:
    """A decider alone: the decision a signal wakes queues the greeting and commits
    without waiting (the worker's claim, a commit that waits, comes next); the run's
    first, which only opens the wait, and the one that finishes the run wait."""
    decider = DeciderLoop(engine, shards=shards, poll_interval=600)
    async with Client(engine, app=app) as client:
        with decision_commits(engine) as settings:
            handle = await client.start(woken, "x")
            await decider.tick()  # opens the wait: no claim follows soon
            await client.signal(handle.run_id, "go", "ada")
            await decider.tick()  # queues the greeting
        assert settings == ["on", "off"]
        async with Runtime(engine, app, roles=Roles(decider=False), poll_interval=0.1):
            await eventually(
                lambda: _greeted(client, handle.run_id), "the worker to run the greeting"
            )
        with decision_commits(engine) as settings:
            await decider.tick()  # finishes the run
        assert settings == ["on"]
        assert await handle.result() == "hello ada"


async def _greeted(client: Client, run_id: Any) -> bool:
    run = await client.get_run(run_id)
    return any(t.node_id == "greet" and t.output is not None for t in run.tasks)


async def test_a_decision_that_hands_attempts_to_its_worker_waits_for_its_flush(
    engine: AsyncEngine,
) -> None:
    """Decider and worker in one process: the decision writes the attempt leased to the
    worker, which runs it at once with no claim of its own, so that decision's commit
    waits; so does the finishing one."""
    async with Client(engine, app=app) as client:
        # A long poll: each poll marks every key as possibly holding queued work, and
        # while it is unclaimed the worker is handed nothing.
        async with Runtime(engine, app, poll_interval=5) as runtime:
            assert runtime.handoff is not None
            # A first run: until its first claim found the queue empty, the worker
            # takes queued work first and is handed nothing.
            assert await (await client.start(greeting, "warm")).result(timeout=30)
            handed = runtime.handoff.handed
            with decision_commits(engine) as settings:
                handle = await client.start(greeting, "x")
                assert await handle.result(timeout=30) == "hello x"
            handed = runtime.handoff.handed - handed
        run = await client.get_run(handle.run_id)
    assert run.run.status is RunStatus.SUCCEEDED
    assert handed == 1  # the greeting went to the worker through the decision
    assert settings == ["on", "on"]


async def test_decisions_made_one_by_one_wait_for_their_flush(engine: AsyncEngine) -> None:
    """A batch whose decision fails is decided again run by run, each in a savepoint of
    one transaction: a run whose decision only queues work then shares its commit with
    the others' writes, so it waits for the flush."""
    decider = DeciderLoop(engine, shards=shards, poll_interval=600)
    async with Client(engine, app=app) as client:
        await client.deploy()
        async with engine.begin() as conn:  # a corrupted stored spec: its runs fail to decide
            await conn.execute(
                update(WorkflowDefinitions.table)
                .where(WorkflowDefinitions.name == "broken")
                .values(spec={"corrupted": True})
            )
        good = await client.start(greeting, "x")
        await client.start(broken, "y")
        with decision_commits(engine) as settings:
            await decider.tick()
        run = await client.get_run(good.run_id)
    assert [t.node_id for t in run.tasks] == ["greet"]  # the good run was decided
    assert settings == ["on"]
