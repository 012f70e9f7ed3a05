"""The apps of the rerun tests: ``orders`` as it shipped with a bug in ``price``
(``buggy``) and as deployed with the fix (``fixed``, a new version: ``price`` also
retries once more), each an ``--app`` for the CLI.

``orders``: ``fetch`` the order, ``price`` it, ``store`` the priced order. Each body
counts its runs in ``BODIES`` (in-process) and, when ``LEGATO_TEST_BODY_LOG`` names a
file, appends its name to it (a subprocess).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    Flow,
    Node,
    Retry,
    RunFailed,
    Runtime,
    TaskContext,
    task,
    workflow,
)

BODIES: Counter[str] = Counter()


def ran(name: str) -> None:
    BODIES[name] += 1
    log = os.environ.get("LEGATO_TEST_BODY_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(name + "\n")


@task(name="fetch")
async def fetch(ctx: TaskContext, order: int) -> int:
    ran("fetch")
    return order * 10


@task(name="price", retry=Retry(attempts=1))
async def price_with_bug(ctx: TaskContext, amount: int) -> int:
    ran("price")
    raise ValueError(f"price: cannot price {amount}")


@task(name="price", retry=Retry(attempts=2))
async def price_fixed(ctx: TaskContext, amount: int) -> int:
    ran("price")
    return amount + 1


@task(name="store")
async def store(ctx: TaskContext, priced: int) -> int:
    ran("store")
    return priced


@workflow("orders")
def orders_with_bug(flow: Flow[int]) -> Node[int]:
    return flow.run(store, flow.run(price_with_bug, flow.run(fetch, flow.input)))


@workflow("orders")
def orders_fixed(flow: Flow[int]) -> Node[int]:
    return flow.run(store, flow.run(price_fixed, flow.run(fetch, flow.input)))


buggy = App([orders_with_bug])
fixed = App([orders_fixed])


# A version whose ``fetch`` returns text now: the stored integers do not fit it.
@task(name="fetch")
async def fetch_text(ctx: TaskContext, order: int) -> str:
    ran("fetch")
    return str(order)


@task(name="price", retry=Retry(attempts=3))
async def price_text(ctx: TaskContext, amount: str) -> int:
    ran("price")
    return len(amount)


@workflow("orders")
def orders_text(flow: Flow[int]) -> Node[int]:
    return flow.run(store, flow.run(price_text, flow.run(fetch_text, flow.input)))


text_fetch = App([orders_text])


async def fail_runs(engine: AsyncEngine, count: int) -> list[uuid.UUID]:
    """``count`` runs of the buggy ``orders`` (deployed), each failed at ``price``."""
    async with Client(engine) as client:
        await client.deploy(buggy)
        async with Runtime(engine, buggy, poll_interval=0.1, grace_period=5):
            handles = await client.start_many(orders_with_bug, list(range(count)))
            async with asyncio.timeout(120):
                for handle in handles:
                    with pytest.raises(RunFailed):
                        await handle.result()
    return [handle.run_id for handle in handles]
