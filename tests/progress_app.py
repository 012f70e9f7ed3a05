"""Workflows the streaming-progress tests run: one task reporting a fixed sequence, one
reporting then waiting on a gate (so a test reads its progress while it runs), one
trying values the bounds refuse, and one whose first attempt hangs after reporting (for
the kill test; ``python -m tests.e2e.procs all --app tests.progress_app``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from legato import (
    App,
    Flow,
    InvalidProgress,
    Node,
    ProgressTooLarge,
    Retry,
    TaskContext,
    task,
    workflow,
)
from legato.progress import MAX_ENTRY_BYTES

# The errors the bounds raised inside ``overreach``, as the body caught them.
REFUSED: list[str] = []
# Set by a test to let ``gated`` finish.
GATE = asyncio.Event()


class Steps(BaseModel):
    count: int


@task()
async def report(ctx: TaskContext, steps: Steps) -> int:
    for step in range(steps.count):
        await ctx.progress({"step": step, "of": steps.count})
    await ctx.stream("done ")
    await ctx.stream("now")
    return steps.count


@task()
async def gated(ctx: TaskContext, steps: Steps) -> int:
    await ctx.progress({"started": True})
    await GATE.wait()
    await ctx.progress({"finished": True})
    return steps.count


@task()
async def overreach(ctx: TaskContext, steps: Steps) -> int:
    await ctx.progress("kept before")
    try:
        await ctx.progress({1: "int key"})
    except InvalidProgress as error:
        REFUSED.append(str(error))
    try:
        await ctx.stream(42)  # type: ignore[arg-type]  # a caller without a type checker
    except InvalidProgress as error:
        REFUSED.append(str(error))
    big = "x" * (MAX_ENTRY_BYTES - 10)
    try:
        await ctx.progress("y" * MAX_ENTRY_BYTES)
    except ProgressTooLarge as error:
        REFUSED.append(str(error))
    written = 1
    while True:  # fill the attempt's bytes until an entry is refused
        try:
            await ctx.stream(big)
        except ProgressTooLarge as error:
            REFUSED.append(str(error))
            break
        written += 1
    await ctx.progress("kept after")
    return written + 1


@task(retry=Retry(attempts=3, backoff=timedelta(milliseconds=100)))
async def hang_first(ctx: TaskContext, steps: Steps) -> int:
    for step in range(steps.count):
        await ctx.progress({"attempt": ctx.attempt, "step": step})
    if ctx.attempt == 1:
        await asyncio.sleep(3600)  # killed here
    return ctx.attempt


@workflow("progress.report")
def report_flow(flow: Flow[Steps]) -> Node[int]:
    return flow.run(report, flow.input)


@workflow("progress.gated")
def gated_flow(flow: Flow[Steps]) -> Node[int]:
    return flow.run(gated, flow.input)


@workflow("progress.overreach")
def overreach_flow(flow: Flow[Steps]) -> Node[int]:
    return flow.run(overreach, flow.input)


@workflow("progress.hang_first")
def hang_first_flow(flow: Flow[Steps]) -> Node[int]:
    return flow.run(hang_first, flow.input)


app = App(workflows=[report_flow, gated_flow, overreach_flow, hang_first_flow])
