"""Concurrency limits, rate limits and the output cache, shared by worker processes."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus, Runtime
from legato.engine.repositories import concurrency
from legato.flow.tasks import queue_limit_name
from legato.schema import ConcurrencySlots, Runs, TaskQueue, Tasks
from tests.e2e import limit_flows
from tests.e2e.test_processes import Spawn, helper_runtime, spawn

__all__ = ["helper_runtime", "spawn"]  # fixtures used by name below

APP = ("--app", "tests.e2e.limit_flows")


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=limit_flows.app) as c:
        yield c


async def _finished(engine: AsyncEngine, workflow: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count())
                    .select_from(Runs.table)
                    .where(Runs.workflow_name == workflow, Runs.status == RunStatus.SUCCEEDED)
                )
            ).scalar_one()
        )


async def _leased(engine: AsyncEngine) -> tuple[int, int]:
    """(attempts of queue ``bulk`` leased now, most ``charges`` attempts leased now for
    one customer): what the limits bound."""
    live = TaskQueue.lease_expires_at > func.now()
    customer = Tasks.input[0]["customer"].astext
    async with engine.connect() as conn:
        bulk = (
            await conn.execute(
                select(func.count())
                .select_from(TaskQueue.table)
                .where(TaskQueue.queue == "bulk", live)
            )
        ).scalar_one()
        per_customer = (
            await conn.execute(
                select(func.count())
                .select_from(TaskQueue.table)
                .join(
                    Tasks.table,
                    (Tasks.run_id == TaskQueue.run_id) & (Tasks.id == TaskQueue.task_id),
                )
                .where(TaskQueue.queue == "charges", live)
                .group_by(customer)
                .order_by(func.count().desc())
                .limit(1)
            )
        ).scalar()
    return int(bulk), int(per_customer or 0)


async def test_per_key_and_per_queue_limits_hold_across_processes_with_kills(
    engine: AsyncEngine, client: Client, spawn: Spawn, helper_runtime: Runtime
) -> None:
    spawn("decider", *APP)
    workers = [spawn("worker", *APP, "--lease", "1", "--concurrency", "8") for _ in range(4)]
    customers = ["ann", "bob", "cy"]
    for n in range(8):
        for customer in customers:
            await client.start(limit_flows.charge_flow, limit_flows.Charge(customer=customer, n=n))
    for n in range(24):
        await client.start(limit_flows.bulk_flow, n)

    samples: list[tuple[int, int]] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append(await _leased(engine))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    try:
        # Kill two workers while they hold slots; their slots must free with their leases.
        for victim in workers[:2]:
            deadline = time.monotonic() + 30
            while (await _leased(engine)) == (0, 0):
                assert time.monotonic() < deadline, "no attempt was leased"
                await asyncio.sleep(0.02)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            await asyncio.sleep(0.3)
        deadline = time.monotonic() + 90
        while await _finished(engine, "charge") < 24 or await _finished(engine, "bulk") < 24:
            assert time.monotonic() < deadline, "runs did not finish: a slot leaked?"
            await asyncio.sleep(0.1)
    finally:
        done.set()
        await sampler
    assert max(bulk for bulk, _ in samples) <= limit_flows.BULK_LIMIT
    assert max(one for _, one in samples) <= 1
    # The limits were reached, so the bounds above were tested, not idle.
    assert max(bulk for bulk, _ in samples) == limit_flows.BULK_LIMIT
    assert max(one for _, one in samples) == 1
    async with engine.connect() as conn:
        assert await concurrency.held(conn, queue_limit_name("bulk")) == 0
        held = (
            await conn.execute(
                select(func.count())
                .select_from(ConcurrencySlots.table)
                .where(ConcurrencySlots.holder_task_id.is_not(None))
            )
        ).scalar_one()
    assert held == 0, "every finished attempt freed its slot"


async def test_a_rate_limit_of_10_per_second_holds_across_processes(
    engine: AsyncEngine, client: Client, spawn: Spawn
) -> None:
    spawn("decider", *APP)
    for _ in range(3):
        spawn("worker", *APP, "--concurrency", "32")
    runs = 80
    for n in range(runs):
        await client.start(limit_flows.rated_flow, n)
    deadline = time.monotonic() + 60
    while await _finished(engine, "rated") < runs:
        assert time.monotonic() < deadline, "rated runs did not finish"
        await asyncio.sleep(0.2)
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(Tasks.started_at, Tasks.attempt).where(Tasks.task_name == "rated")
            )
        ).all()
    starts: list[datetime] = sorted(row.started_at for row in rows)
    assert len(starts) == runs and all(row.attempt == 1 for row in rows), "waiting burns no retry"
    window = timedelta(seconds=5)
    # A full bucket (10) bursts, then 10 per second: at most 60 starts in any 5 s.
    busiest = max(sum(1 for s in starts if first <= s < first + window) for first in starts)
    assert busiest <= 10 + 50 + 2, busiest
    # ...and not much fewer: the limit paces the work, it does not stall it.
    assert busiest >= 40, busiest
    elapsed = (starts[-1] - starts[0]).total_seconds()
    assert elapsed >= (runs - 10) / 10 * 0.9, elapsed


@pytest_asyncio.fixture
async def runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    rt = Runtime(engine, limit_flows.app, poll_interval=0.2, grace_period=2.0)
    await rt.start()
    yield rt
    await rt.stop()


async def test_a_cached_task_runs_once_for_two_runs_with_equal_inputs(
    client: Client, runtime: Runtime
) -> None:
    limit_flows.CACHED_CALLS.clear()
    first = await client.start(limit_flows.cached_flow, 7)
    assert await first.result(timeout=30) == 49
    second = await client.start(limit_flows.cached_flow, 7)
    other = await client.start(limit_flows.cached_flow, 8)
    assert await second.result(timeout=30) == 49
    assert await other.result(timeout=30) == 64
    assert sorted(limit_flows.CACHED_CALLS) == [7, 8]
    # The second run's output came from the cache, and its history says so; the first's
    # body ran, and its event has no such key.
    events = {
        handle: [e for e in await client.history(handle.run_id) if e.type == "task_completed"]
        for handle in (first, second)
    }
    (ran,), (served,) = events[first], events[second]
    assert isinstance(ran.data, dict) and isinstance(served.data, dict)
    assert "cached" not in ran.data and ran.data["output"] == 49
    assert served.data["cached"] is True and served.data["output"] == 49
