"""Workflows for the schedule and run-timeout tests (importable as an --app)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


class Tick(BaseModel):
    label: str


@task()
async def note(ctx: TaskContext, tick: Tick) -> Tick:
    return tick


@workflow("sched.tick")
def tick(flow: Flow[Tick]) -> Node[Tick]:
    return flow.run(note, flow.input)


ONE_SECOND = timedelta(seconds=1)
SKIP_GRACE = timedelta(seconds=0.5)
tick.schedule("all", every=ONE_SECOND, catch_up="all", input=Tick(label="all"))
tick.schedule("bounded", every=ONE_SECOND, catch_up="all", max_catch_up=2, input=Tick(label="b"))
tick.schedule("once", every=ONE_SECOND, catch_up="once", input=Tick(label="once"))
tick.schedule("skip", every=2 * ONE_SECOND, grace=SKIP_GRACE, input=Tick(label="skip"))

app = App([tick])

# The run-timeout test: a task that never returns next to a wait never signalled.
CANCELLED = asyncio.Event()


@task()
async def hang(ctx: TaskContext, tick: Tick) -> Tick:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CANCELLED.set()
        raise
    return tick


@workflow("sched.stuck", execution_timeout=timedelta(seconds=2))
def stuck(flow: Flow[Tick]) -> Node[Tick]:
    flow.wait_for_event("never", Tick)
    return flow.run(hang, flow.input)


stuck_app = App([stuck])
