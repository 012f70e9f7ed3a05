"""A worker's report flush batches reports only while more can join: a lone attempt's
outcome is written at once, however long the batching wait is, so a run's next step
(an agent loop's, at low load) does not wait on it. In a process that also decides, a
report being written holds the decider's look until it ends, so the report costs one
take."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, RunStatus, TaskContext, task, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.engine.loops.worker import Worker
from legato.engine.transport.handoff import ReportsToDecider
from legato.schema import DEFAULT_SHARD_COUNT, Shards
from tests.helpers import eventually


@task()
async def shout(ctx: TaskContext, word: str) -> str:
    return word.upper()


@workflow("shouted")
def shouted(flow: Flow[str]) -> Node[str]:
    return flow.run(shout, flow.input)


app = App(workflows=[shouted])
shards = Shards(DEFAULT_SHARD_COUNT)


async def test_a_lone_report_is_written_without_the_batching_wait(engine: AsyncEngine) -> None:
    decider = DeciderLoop(engine, shards=shards, poll_interval=600)
    # A wait no test would sit through: the report must not take it.
    worker = Worker(engine, app, shards=shards, poll_interval=0.05, flush_interval=600)
    running = asyncio.create_task(worker.run())
    try:
        async with Client(engine, app=app) as client:
            handle = await client.start(shouted, "hi")
            await decider.tick()  # queues the attempt; the worker's poll claims it
            await eventually(lambda: worker.completed == 1, "the attempt's report")

            async def finished() -> bool:
                await decider.tick()
                return (await client.get_run(handle.run_id)).run.status is RunStatus.SUCCEEDED

            await eventually(finished, "the run to finish")
            assert await handle.result() == "HI"
    finally:
        worker.stop()
        await running


async def test_the_local_decider_waits_for_a_report_being_written(engine: AsyncEngine) -> None:
    """While a report of its own process's worker is being written, the decider neither
    takes nor settles (either would race the report's commit, and the report's nudge
    would then take again); the report's end wakes it, and one take decides the run."""
    decider: DeciderLoop

    reports = ReportsToDecider(None, lambda keys: decider.decide_now(keys), lambda: decider.nudge())
    decider = DeciderLoop(engine, shards=shards, poll_interval=600, local_reports=reports)
    async with Client(engine, app=app) as client:
        handle = await client.start(shouted, "hi")
    with reports.committing():
        assert await decider.tick() is False
        assert decider.takes == 0
        assert decider.sleep_gate.sleeps == 0
        reports.reported([shards.of_run(handle.run_id)])
        # A key marked by a committed report is taken even while another report runs.
        assert await decider.tick() is False
        assert (decider.takes, decider.decided) == (1, 1)
    assert await decider.tick() is False  # nothing left: the keys' sleep flags are set
    assert (decider.takes, decider.sleep_gate.sleeps) == (2, 1)
