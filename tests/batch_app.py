"""Workflows the batch-task tests run: a batch task that doubles its inputs (recording
each body call's size), one whose first call fails, and one returning too few outputs."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from legato import App, Batch, BatchContext, Flow, Node, Retry, batch_task, workflow

# The inputs of each body call, in call order: what a user sees batched.
CALLS: list[list[int]] = []


class Number(BaseModel):
    n: int


class Doubled(BaseModel):
    n: int
    attempt: int


BATCH = Batch(max_size=3, max_wait=timedelta(milliseconds=300))


@batch_task(BATCH)
async def double(ctx: BatchContext, items: list[Number]) -> list[Doubled]:
    CALLS.append([item.n for item in items])
    for item_ctx, item in zip(ctx.items, items, strict=True):
        await item_ctx.progress({"doubling": item.n})
    return [
        Doubled(n=item.n * 2, attempt=c.attempt) for c, item in zip(ctx.items, items, strict=True)
    ]


@batch_task(BATCH, retry=Retry(attempts=2, backoff=timedelta(milliseconds=50)))
async def flaky_double(ctx: BatchContext, items: list[Number]) -> list[Doubled]:
    CALLS.append([item.n for item in items])
    if any(c.attempt == 1 for c in ctx.items):
        raise ConnectionError("the bulk API is busy")
    return [
        Doubled(n=item.n * 2, attempt=c.attempt) for c, item in zip(ctx.items, items, strict=True)
    ]


@batch_task(BATCH)
async def short(ctx: BatchContext, items: list[Number]) -> list[Doubled]:
    return [Doubled(n=0, attempt=1)][: len(items) - 1]


@workflow("batch.double")
def double_flow(flow: Flow[Number]) -> Node[Doubled]:
    return flow.run(double, flow.input)


@workflow("batch.flaky")
def flaky_flow(flow: Flow[Number]) -> Node[Doubled]:
    return flow.run(flaky_double, flow.input)


@workflow("batch.short")
def short_flow(flow: Flow[Number]) -> Node[Doubled]:
    return flow.run(short, flow.input)


app = App(workflows=[double_flow, flaky_flow, short_flow])
