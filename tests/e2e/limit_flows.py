"""Workflows with concurrency limits, a rate limit and a cached task (``test_limits.py``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from legato import (
    App,
    Cache,
    Concurrency,
    Flow,
    Node,
    RateLimit,
    Retry,
    TaskContext,
    task,
    workflow,
)

RETRY = Retry(attempts=10, backoff=timedelta(milliseconds=50))


class Charge(BaseModel):
    customer: str
    n: int


@task(queue="charges", concurrency=Concurrency(1, key=lambda c: c.customer), retry=RETRY)
async def charge(ctx: TaskContext, c: Charge) -> str:
    await asyncio.sleep(0.15)
    return f"{c.customer}-{c.n}"


@workflow("charge")
def charge_flow(flow: Flow[Charge]) -> Node[str]:
    return flow.run(charge, flow.input)


@task(queue="bulk", retry=RETRY)
async def bulk(ctx: TaskContext, n: int) -> int:
    await asyncio.sleep(0.3)
    return n


@workflow("bulk")
def bulk_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(bulk, flow.input)


@task(queue="rated", rate_limit=RateLimit(10, per=timedelta(seconds=1)))
async def rated(ctx: TaskContext, n: int) -> int:
    return n


@workflow("rated")
def rated_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(rated, flow.input)


CACHED_CALLS: list[int] = []


@task(cache=Cache(expires=timedelta(hours=1)))
async def expensive(ctx: TaskContext, n: int) -> int:
    CACHED_CALLS.append(n)
    return n * n


@workflow("cached")
def cached_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(expensive, flow.input)


BULK_LIMIT = 3

app = App(
    workflows=[charge_flow, bulk_flow, rated_flow, cached_flow],
    queue_limits={"bulk": BULK_LIMIT},
)
