"""Fair share per key: a fair queue's attempts are claimed round-robin between their keys
(by weight), so one tenant's backlog of 1,000 does not delay another tenant's trickle;
limits still hold on a fair queue; a key that cannot be computed fails its attempt in
the history, not the loop. On an install of one shard key, so every claim of the queue
is the one fair claim whose order is measured.

Claim order is read from the attempts' rows: ``available_at`` (when the attempt could
be claimed) and ``started_at`` (the claim that took it)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFailed, Runtime, migrations
from legato.db import create_engine
from legato.runtime import Roles
from legato.schema import TaskQueue, Tasks, TaskState
from tests import fair_app
from tests.fair_app import Job, app, limited_flow, tenant_flow
from tests.helpers import count_rows, eventually
from tests.integration.test_shard_statements import _check, recorded

_NEVER = datetime.max.replace(tzinfo=UTC)
DECIDER = Roles(worker=False)
WORKER = Roles(decider=False, timer=False)


@pytest_asyncio.fixture
async def one_key_engine(empty_database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(empty_database_url, "legato")
    await migrations.upgrade(engine, "legato", shard_count=1)
    yield engine
    await engine.dispose()


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    fair_app.STARTED.clear()
    fair_app.RUNNING.update(now=0, most=0)


async def _attempts(engine: AsyncEngine, task_name: str) -> list[tuple[str, datetime, datetime]]:
    """(tenant, available_at, started_at) of every attempt of ``task_name``, in claim
    order (``datetime.max`` for those not claimed)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(Tasks.input, Tasks.available_at, Tasks.started_at)
            .where(Tasks.task_name == task_name)
            .order_by(Tasks.started_at.nulls_last(), Tasks.id)
        )
        return [
            (_tenant(inputs), ready, started or _NEVER) for inputs, ready, started in rows.all()
        ]


def _tenant(inputs: object) -> str:
    assert isinstance(inputs, list) and isinstance(inputs[0], dict)
    return str(inputs[0]["tenant"])


async def _completed(engine: AsyncEngine, task_name: str, tenant: str | None = None) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).where(
            Tasks.task_name == task_name, Tasks.state == TaskState.COMPLETED
        )
        if tenant is not None:
            query = query.where(Tasks.input[0]["tenant"].astext == tenant)
        return int((await conn.execute(query)).scalar_one())


async def test_a_trickle_is_claimed_within_a_few_claims_of_a_backlog_of_1000(
    one_key_engine: AsyncEngine,
) -> None:
    engine = one_key_engine
    concurrency = 4
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        burst = [Job(tenant="burst", n=n, seconds=0.02) for n in range(1000)]
        await client.start_many(tenant_flow, burst)
        async with Runtime(engine, app, roles=DECIDER, poll_interval=0.1):
            await eventually(lambda: _queued(engine, 1000), "the burst enqueued", timeout=60)
        # Decider and worker in runtimes of their own: no attempt is handed to the worker
        # in memory, every one is claimed from the queue.
        async with (
            Runtime(engine, app, roles=DECIDER, poll_interval=0.1),
            Runtime(engine, app, roles=WORKER, concurrency=concurrency, poll_interval=0.1),
        ):
            trickle = []
            for claimed in range(50, 350, 50):
                await eventually(
                    functools.partial(_started, engine, claimed),
                    f"{claimed} burst jobs claimed",
                    timeout=60,
                )
                trickle.append(await client.start(tenant_flow, Job(tenant="trickle", n=claimed)))
            assert [await h.result(timeout=60) for h in trickle] == list(range(50, 350, 50))
        attempts = await _attempts(engine, "tenant_job")
    waits = []
    for tenant, ready, started in attempts:
        if tenant != "trickle":
            continue
        # The burst's attempts waiting when this one was enqueued, and those of them
        # claimed before it: oldest first, it would wait behind all of them.
        waiting = [a for a in attempts if a[0] == "burst" and a[1] < ready < a[2]]
        overtaking = [a for a in waiting if a[2] < started]
        waits.append((len(waiting), len(overtaking)))
    assert len(waits) == 6
    # The claims under way when it was enqueued take at most their slots before it.
    assert all(overtaking <= 2 * concurrency for _, overtaking in waits), waits
    assert all(waiting >= 500 for waiting, _ in waits), f"no backlog to wait behind: {waits}"


async def test_weights_share_the_claims_in_proportion(one_key_engine: AsyncEngine) -> None:
    engine = one_key_engine
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        jobs = [Job(tenant="gold", n=n, weight=3) for n in range(300)]
        jobs += [Job(tenant="free", n=n, weight=1) for n in range(300)]
        await client.start_many(tenant_flow, jobs)
        async with Runtime(engine, app, roles=DECIDER, poll_interval=0.1):
            await eventually(lambda: _queued(engine, 600), "every attempt enqueued", timeout=60)
        async with Runtime(engine, app, roles=WORKER, concurrency=4, poll_interval=0.1):
            await eventually(lambda: _started(engine, 200), "200 attempts claimed", timeout=60)
        attempts = [a for a in await _attempts(engine, "tenant_job") if a[2] < _NEVER][:200]
    gold = sum(tenant == "gold" for tenant, _, _ in attempts)
    # Weight 3 to 1: three of every four claims while both keys wait.
    assert 0.65 <= gold / len(attempts) <= 0.85, f"gold got {gold} of {len(attempts)}"
    async with engine.connect() as conn:
        weights = await conn.execute(
            select(TaskQueue.fair_key, func.min(TaskQueue.fair_weight)).group_by(TaskQueue.fair_key)
        )
        assert dict(weights.all()) == {"gold": 3, "free": 1}


async def _queued(engine: AsyncEngine, n: int) -> bool:
    return await count_rows(engine, TaskQueue) >= n


async def _started(engine: AsyncEngine, n: int) -> bool:
    return await count_rows(engine, Tasks, Tasks.started_at.is_not(None)) >= n


async def test_a_concurrency_limit_holds_on_a_fair_queue_and_keys_still_alternate(
    one_key_engine: AsyncEngine,
) -> None:
    engine = one_key_engine
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        jobs = [Job(tenant="burst", n=n, seconds=0.02) for n in range(30)]
        jobs += [Job(tenant="trickle", n=n, seconds=0.02) for n in range(4)]
        handles = await client.start_many(limited_flow, jobs)
        async with Runtime(engine, app, roles=DECIDER, poll_interval=0.1):
            await eventually(lambda: _queued(engine, 34), "every attempt enqueued", timeout=60)
        with recorded(engine) as sent:
            async with (
                Runtime(engine, app, roles=WORKER, concurrency=8, poll_interval=0.1),
                Runtime(engine, app, roles=DECIDER, poll_interval=0.1),
            ):
                results = [await h.result(timeout=60) for h in handles]
    assert results == [job.n for job in jobs]
    assert fair_app.RUNNING["most"] == 2  # Concurrency(2), with 8 free slots
    # The trickle's 4 jobs among the first starts, not behind the 30.
    assert [i for i, tenant in enumerate(fair_app.STARTED) if tenant == "trickle"][-1] < 12
    fair_statements = [s for s in sent if "fair_keys" in s.sql]
    assert fair_statements, "the limited claim of a fair queue did not use the fair claim"
    checked, failures = await _check(engine, fair_statements)
    assert checked >= 1 and not failures, "\n".join(failures)


async def test_the_fair_claim_touches_one_shard_key(engine: AsyncEngine) -> None:
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        handles = await client.start_many(
            tenant_flow, [Job(tenant=f"t{n % 3}", n=n) for n in range(12)]
        )
        with recorded(engine) as sent:
            async with Runtime(engine, app, poll_interval=0.1):
                assert [await h.result(timeout=60) for h in handles] == list(range(12))
    fair_statements = [s for s in sent if "fair_keys" in s.sql]
    assert fair_statements
    checked, failures = await _check(engine, fair_statements)
    assert checked >= 1 and not failures, "\n".join(failures)


async def test_an_unusable_key_fails_its_attempt_in_the_history_not_the_loop(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        bad = await client.start(tenant_flow, Job(tenant=""))  # an empty key
        with pytest.raises(RunFailed) as failed:
            await bad.result(timeout=30)
        assert failed.value.error is not None
        assert failed.value.error.type == "FairShareKeyError"
        assert "FairShare key '' is no key" in failed.value.error.message
        attempts = (await client.get_run(bad.run_id)).tasks
        assert [a.attempt for a in attempts] == [1]  # not retried
        # The loops go on: the next run of the queue runs.
        good = await client.start(tenant_flow, Job(tenant="a", n=7))
        assert await good.result(timeout=30) == 7


async def test_rows_without_a_key_on_a_fair_queue_are_still_claimed(
    engine: AsyncEngine,
) -> None:
    """A decider whose app lacks the fair task (a rolling deploy) enqueues rows without a
    key; the fair queue's worker still runs them."""
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        await client.start_many(tenant_flow, [Job(tenant="a", n=n) for n in range(5)])
        async with Runtime(engine, app, roles=DECIDER, poll_interval=0.1) as decider:
            for loop in decider.decider_loops:
                loop.fair = None  # as a decider without the fair task would
            await eventually(lambda: _queued(engine, 5), "every attempt enqueued", timeout=30)
        assert await count_rows(engine, TaskQueue, TaskQueue.fair_key.is_(None)) == 5
        async with Runtime(engine, app, roles=WORKER, poll_interval=0.1):
            await eventually(
                lambda: _all_completed(engine, 5), "the unkeyed attempts run", timeout=30
            )


async def _all_completed(engine: AsyncEngine, n: int) -> bool:
    return await _completed(engine, "tenant_job") == n
