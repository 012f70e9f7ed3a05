"""A decide NOTIFY only for a sleeping decider (migration 0018, docs/design.md "A NOTIFY
only for a sleeping decider"): of many concurrent writers one notifies per sleep, a
writer in flight keeps the decider from sleeping until its commit is visible, and under
load from many clients every run is decided with the deciders' polls an hour apart (so
only a NOTIFY or a decider's own look can have moved them) and far fewer NOTIFYs than
starts or signals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato import (
    App,
    Client,
    Flow,
    Node,
    Roles,
    RunStatus,
    Runtime,
    TaskContext,
    task,
    workflow,
)
from legato.engine.repositories import decide_queue, decider_sleep, notify
from legato.engine.repositories.decider_sleep import Settled
from legato.models import RunFilter
from tests.helpers import eventually
from tests.integration.notifications import Heard

STARTERS = 32  # concurrent clients
STARTS = 320


@task()
async def double(ctx: TaskContext, value: int) -> int:
    return 2 * value


@workflow("slept")
def doubled(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.input)


@workflow("slept_signalled")
def signalled(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.wait_for_event("go", int))


app = App([doubled, signalled])


async def _settle(engine: AsyncEngine, keys: range) -> Settled:
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return await decider_sleep.settle(autocommit, keys)


async def _sql_start(conn: AsyncConnection, value: int) -> None:
    await conn.execute(
        text(
            "SELECT legato.start_run_v1('slept', to_jsonb(CAST(:value AS int)), "
            "shard_key => 'tenant')"
        ),
        {"value": value},
    )


async def _concurrently(count: int, one: Callable[[int], Awaitable[object]]) -> None:
    """``one(0) .. one(count - 1)``, at most ``STARTERS`` at a time."""
    gate = asyncio.Semaphore(STARTERS)

    async def gated(index: int) -> None:
        async with gate:
            await one(index)

    await asyncio.gather(*(gated(index) for index in range(count)))


async def test_of_many_concurrent_starts_one_notifies_per_sleep(engine: AsyncEngine) -> None:
    async with Client(engine, app=app) as client, Heard(engine) as heard:
        await client.deploy()
        shards = await client.shards()
        assert await _settle(engine, shards.all()) is Settled.ASLEEP
        await heard.settled()
        await _concurrently(
            STARTERS * 2, lambda value: client.start(doubled, value, shard_key="tenant")
        )
        assert await heard.settled() == [(heard.decide_channel, str(shards.of_key("tenant")))]


async def test_a_writer_in_flight_keeps_the_decider_awake_until_its_run_is_seen(
    engine: AsyncEngine,
) -> None:
    """The race the flags must close: the decider looks for work while a start has
    read the flag (clear) and not yet committed. It may not sleep then: it is told to
    look again, and once the start commits it finds its run."""
    async with Client(engine, app=app) as client, Heard(engine) as heard:
        await client.deploy()
        shards = await client.shards()
        async with engine.connect() as writer:
            await _sql_start(writer, 1)  # its trigger read the flag: clear, no NOTIFY
            assert await _settle(engine, shards.all()) is Settled.BUSY
            await writer.commit()
        assert await heard.settled() == []
        assert await _settle(engine, shards.all()) is Settled.WORK

        async with engine.begin() as conn:
            taken = await decide_queue.take_held(conn, shards.all(), shards.count, 10)
            assert len(taken.failures) == 1
        assert await _settle(engine, shards.all()) is Settled.ASLEEP
        async with engine.begin() as conn:  # the flag was set before it: it notifies
            await _sql_start(conn, 2)
        assert await heard.settled() == [(heard.decide_channel, str(shards.of_key("tenant")))]


async def _sleeps(runtime: Runtime) -> int:
    return sum(loop.sleep_gate.sleeps for loop in runtime.decider_loops)


async def _all_done(client: Client, workflow: str) -> bool:
    done = await client.count_runs(RunFilter(workflow=workflow, status=RunStatus.SUCCEEDED))
    return done == STARTS


async def _decide_notifies(heard: Heard) -> int:
    return sum(1 for channel, _ in await heard.settled() if channel == heard.decide_channel)


async def test_starts_from_many_clients_are_decided_with_far_fewer_notifies(
    engine: AsyncEngine,
) -> None:
    async with (
        Runtime(engine, app, poll_interval=3600) as runtime,
        Client(engine, app=app) as client,
        Heard(engine) as heard,
    ):
        await eventually(lambda: _sleeps_now(runtime), "the deciders asleep")
        await heard.settled()
        sleeps_before = await _sleeps(runtime)
        await _concurrently(STARTS, lambda value: client.start(doubled, value, shard_key="t"))
        # The deciders poll once an hour: only NOTIFYs and their own looks move runs.
        await eventually(lambda: _all_done(client, "slept"), "every run decided", timeout=120)
        notified = await _decide_notifies(heard)
        sleeps = await _sleeps(runtime) - sleeps_before
    assert notified <= sleeps, "at most one NOTIFY per sleep of the deciders"
    assert notified * 4 < STARTS, f"{notified} NOTIFYs for {STARTS} starts"


def _sleeps_now(runtime: Runtime) -> bool:
    return all(loop.sleep_gate.sleeps > 0 for loop in runtime.decider_loops)


async def test_signals_from_many_clients_are_decided_with_far_fewer_notifies(
    engine: AsyncEngine,
) -> None:
    async with (
        Runtime(engine, app, poll_interval=3600) as runtime,
        Client(engine, app=app) as client,
        Heard(engine) as heard,
    ):
        handles = await client.start_many(signalled, list(range(STARTS)), shard_key="t")
        run_ids = [str(handle.run_id) for handle in handles]
        await eventually(lambda: _sleeps_now(runtime), "the deciders asleep")
        await heard.settled()
        sleeps_before = await _sleeps(runtime)

        await _concurrently(STARTS, lambda index: client.signal(run_ids[index], "go", index))
        await eventually(
            lambda: _all_done(client, "slept_signalled"), "every run decided", timeout=120
        )
        notified = await _decide_notifies(heard)
        sleeps = await _sleeps(runtime) - sleeps_before
    assert notified <= sleeps, "at most one NOTIFY per sleep of the deciders"
    assert notified * 4 < STARTS, f"{notified} NOTIFYs for {STARTS} signals"


async def test_a_report_that_woke_no_one_does_not_swallow_a_later_wake_up(
    engine: AsyncEngine,
) -> None:
    """A worker's report flush in a process that also decides drops its own decide
    NOTIFY (its local decider is woken in memory), but since 0018 the flush sends one
    only if a decider slept. The drop a flush registered for a NOTIFY it never sent must
    not swallow a later writer's NOTIFY from the same pooled backend once the decider
    sleeps: polls an hour apart, so only that NOTIFY can wake it."""
    async with Client(engine, app=app) as client:
        await client.deploy()
        roles = Roles(decider=True, worker=False, timer=False, deploy=False)
        async with Runtime(engine, app, roles=roles, poll_interval=3600) as runtime:
            loop = runtime.decider_loops[0]
            await eventually(lambda: loop.sleep_gate.sleeps > 0, "the decider to sleep")
            async with engine.connect() as conn:
                autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
                pid = (await autocommit.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                # What a report flush on this backend registers when its commit sent no
                # NOTIFY (the decider was awake then).
                runtime.wakeups.absorb(notify.decide_channel("legato"), int(pid))
                # Another backend's start wakes the decider, which decides and sleeps again.
                slept = loop.sleep_gate.sleeps
                await client.start(doubled, 1)
                await eventually(lambda: loop.sleep_gate.sleeps > slept, "the next sleep")
                await _sql_start(autocommit, 2)
                await eventually(
                    lambda: _first_tasks(engine, 2),
                    "the run started on the absorbing backend to be decided",
                    timeout=20,
                )


async def _first_tasks(engine: AsyncEngine, runs: int) -> bool:
    async with engine.connect() as conn:
        count = await conn.execute(text("SELECT count(*) FROM legato.tasks"))
        return int(count.scalar_one()) >= runs


async def test_a_sleep_writes_only_the_flags_that_change(engine: AsyncEngine) -> None:
    """A decider going to sleep with every flag already set writes nothing (no
    transaction id, so no WAL flush at its commit); with one key's flag cleared by a
    writer it rewrites that row alone (migration 0020)."""
    keys = range(16)
    assert await _settle(engine, keys) is Settled.ASLEEP
    async with engine.connect() as conn:
        before = await _flag_versions(conn)
        await decider_sleep.settle(conn, keys)
        assert (await conn.scalar(text("SELECT pg_current_xact_id_if_assigned()"))) is None
        await conn.rollback()
        await conn.execute(text("UPDATE legato.decider_sleep SET asleep = false WHERE shard = 5"))
        await conn.commit()
        cleared = await _flag_versions(conn)
        await conn.commit()
    assert await _settle(engine, keys) is Settled.ASLEEP
    async with engine.connect() as conn:
        after = await _flag_versions(conn)
        asleep = await conn.scalar(text("SELECT bool_and(asleep) FROM legato.decider_sleep"))
    assert {key for key in keys if cleared[key] != before[key]} == {5}
    assert {key for key in keys if after[key] != cleared[key]} == {5} and asleep


async def _flag_versions(conn: AsyncConnection) -> dict[int, str]:
    """Each key's flag row's ``xmin`` and ``xmax``: a row rewritten or locked changes."""
    rows = await conn.execute(
        text("SELECT shard, xmin::text || '/' || xmax::text FROM legato.decider_sleep")
    )
    return {int(shard): version for shard, version in rows}
