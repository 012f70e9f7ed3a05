"""In-process hand-offs (``legato.engine.transport.handoff``): a decision leases new attempts to the
worker of its own process, within that worker's concurrency; the rest stay queued for
any worker's claim."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, Runtime, TaskContext, TaskState, task, workflow
from legato.engine.loops.worker import Worker
from legato.engine.transport.handoff import ReportsToDecider
from legato.engine.transport.wakeups import Wakeups
from legato.schema import TaskQueue, Tasks
from tests.helpers import eventually
from tests.integration.notifications import Heard


class Gate:
    """Holds every ``held`` attempt until opened, counting how many are inside."""

    def __init__(self) -> None:
        self.inside = 0
        self.open = asyncio.Event()


GATE = Gate()


@task()
async def held(ctx: TaskContext, n: int) -> int:
    GATE.inside += 1
    try:
        await GATE.open.wait()
    finally:
        GATE.inside -= 1
    return n * 10


@task()
async def tenfold(ctx: TaskContext, n: int) -> int:
    return n * 10


@workflow("held_fanout")
def held_fanout(flow: Flow[list[int]]) -> Node[list[int]]:
    return flow.map(held, flow.input)


@workflow("tenfold_twice")
def tenfold_twice(flow: Flow[int]) -> Node[int]:
    return flow.run(tenfold, flow.run(tenfold, flow.input))


app = App(workflows=[held_fanout, tenfold_twice])


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    global GATE
    GATE = Gate()
    async with Client(engine, app=app) as c:
        yield c


async def _owners(engine: AsyncEngine, state: TaskState) -> Counter[str | None]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(Tasks.lease_owner).where(Tasks.state == state))
        return Counter(rows.scalars())


async def _swept(runtime: Runtime) -> None:
    """Until the local worker's first claim round (one claim per key) is over: each claim
    reserves every free slot, so a decision meanwhile hands nothing off."""
    worker = runtime.worker
    assert worker is not None
    await eventually(
        lambda: worker._all_marked_at > -math.inf and not worker._dirty and not worker._reserved,
        "the worker's first claims",
    )


async def test_a_decision_hands_new_attempts_to_the_local_worker(
    engine: AsyncEngine, client: Client
) -> None:
    # Every attempt ran without a claim: each was leased in the decision that made it.
    # A decision over runs of several keys drops its own queue NOTIFY of each key it
    # handed off (one per key), so no claim round of the worker's reserves the slots
    # the next decision hands attempts to.
    async with Runtime(engine, app, poll_interval=60) as runtime:
        assert runtime.handoff is not None and runtime.worker is not None
        await _swept(runtime)
        handles = [await client.start(tenfold_twice, n) for n in range(5)]
        assert [await h.result(timeout=20) for h in handles] == [n * 100 for n in range(5)]
        assert runtime.handoff.handed == 10, runtime.handoff.handed
    async with engine.connect() as conn:
        stamps = (await conn.execute(select(Tasks.available_at, Tasks.started_at))).all()
    # What a claim would have stamped: started when leased, never before it was available.
    assert len(stamps) == 10
    assert all(started is not None and started >= available for available, started in stamps)


async def test_a_handed_attempt_is_written_leased_by_the_decision_itself(
    engine: AsyncEngine, client: Client
) -> None:
    """The decision's one write inserts the attempt RUNNING and its queue row leased to
    the local worker, the lease running from the server's clock: no statement of its
    own leases it afterwards, no row version is updated to do so, and no NOTIFY wakes
    a worker for it."""
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    async with Runtime(engine, app, poll_interval=60) as runtime, Heard(engine) as heard:
        assert runtime.handoff is not None and runtime.worker is not None
        await _swept(runtime)
        await heard.settled()
        event.listen(engine.sync_engine, "before_cursor_execute", record)
        try:
            handle = await client.start(held_fanout, [7])
            await eventually(lambda: GATE.inside == 1, "the attempt to be running")
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", record)
        assert runtime.handoff.handed == 1
        # The row written leased woke no worker, here or in any other process.
        assert [ch for ch, _ in await heard.settled() if ch == heard.tasks_channel] == []
        async with engine.connect() as conn:
            queued = (
                await conn.execute(
                    select(
                        TaskQueue.lease_owner,
                        TaskQueue.lease_expires_at,
                        TaskQueue.available_at,
                        func.now(),
                    )
                )
            ).one()
            attempt = (
                await conn.execute(
                    select(Tasks.state, Tasks.lease_owner, Tasks.started_at).where(
                        Tasks.task_name == "held"
                    )
                )
            ).one()
        GATE.open.set()
        assert await handle.result(timeout=20) == [70]
        worker_id = runtime.worker.worker_id
        lease = runtime.worker.lease
    owner, expires_at, available_at, server_now = queued
    assert owner == worker_id and expires_at is not None
    assert lease - timedelta(seconds=10) < expires_at - server_now <= lease
    assert attempt == (TaskState.RUNNING, worker_id, available_at)
    # A claim's lease, or the old hand-off's: an UPDATE of the queue rows by a CTE.
    leases = [s for s in statements if s.startswith("WITH leased AS")]
    assert leases == [], leases
    assert any(s.startswith("WITH inserted_tasks AS") for s in statements)


async def test_hand_offs_stay_within_the_worker_concurrency_and_a_remote_worker_gets_the_rest(
    engine: AsyncEngine, client: Client
) -> None:
    remote = Worker(
        engine,
        app,
        shards=await client.shards(),
        concurrency=8,
        poll_interval=0.05,
        worker_id="remote",
    )
    remote_loop = asyncio.create_task(remote.run())
    try:
        # No poll in this process: a poll would start a claim round (one claim per key,
        # each reserving every free slot), and a decision meanwhile hands nothing off.
        # The remote worker polls; this one is woken by its own decisions.
        async with Runtime(engine, app, concurrency=2, poll_interval=60) as runtime:
            assert runtime.handoff is not None and runtime.worker is not None
            await _swept(runtime)
            handle = await client.start(held_fanout, list(range(6)))
            await eventually(lambda: GATE.inside == 6, "all six attempts to be running")
            # The decision filled the local worker's two slots; the remote worker claimed
            # the four left queued.
            assert runtime.handoff.handed == 2
            assert await _owners(engine, TaskState.RUNNING) == {
                runtime.worker.worker_id: 2,
                "remote": 4,
            }
            GATE.open.set()
            assert await handle.result(timeout=20) == [n * 10 for n in range(6)]
            # A second fan-out while the local worker is idle again: two handed off, never
            # more than its two slots at once in this process.
            GATE.open.clear()
            handed_before = runtime.handoff.handed
            second = await client.start(held_fanout, list(range(3)))
            await eventually(lambda: GATE.inside == 3, "all three attempts to be running")
            assert runtime.handoff.handed - handed_before == 2
            owners = await _owners(engine, TaskState.RUNNING)
            assert owners == {runtime.worker.worker_id: 2, "remote": 1}
            GATE.open.set()
            assert await second.result(timeout=20) == [0, 10, 20]
    finally:
        remote.stop()
        await remote_loop


async def test_a_burst_larger_than_the_worker_concurrency_drains_without_waiting_for_a_poll(
    engine: AsyncEngine, client: Client
) -> None:
    """The first decision fills the worker's slots and leaves the rest queued; each slot
    that frees claims the queued attempts at once (a poll would come only after 60 s)."""
    async with Runtime(engine, app, concurrency=2, poll_interval=60) as runtime:
        assert runtime.handoff is not None
        await _swept(runtime)
        handles = await client.start_many(tenfold_twice, list(range(12)))
        async with asyncio.timeout(30):
            results = [await handle.result(timeout=30) for handle in handles]
        assert results == [n * 100 for n in range(12)]
        assert runtime.handoff.handed >= 2


async def test_a_handed_off_run_leaves_no_empty_claim_or_take_behind(
    engine: AsyncEngine, client: Client
) -> None:
    """The enqueue's and the report's NOTIFYs are absorbed: the loops they would wake
    were woken in memory, so nothing wakes twice to find nothing."""
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    # Polling once a minute: every claim or take below was woken by a NOTIFY or a nudge.
    async with Runtime(engine, app, poll_interval=60) as runtime:
        await _swept(runtime)
        assert await (await client.start(tenfold_twice, 0)).result(timeout=20) == 0
        event.listen(engine.sync_engine, "before_cursor_execute", record)
        try:
            for n in range(1, 6):
                assert await (await client.start(tenfold_twice, n)).result(timeout=20) == n * 100
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", record)
        assert runtime.handoff is not None and runtime.handoff.handed == 12
    claims = [s for s in statements if s.startswith("WITH candidates AS MATERIALIZED")]
    takes = [s for s in statements if "decider_take_v2" in s]
    assert claims == []
    assert len(takes) == 5 * 3  # each run's three decisions, nothing more


async def test_an_absorbed_notification_is_dropped_once(engine: AsyncEngine) -> None:
    wakeups = Wakeups(engine)
    heard: list[str] = []
    try:
        woken = await wakeups.subscribe("legato_test_absorb", heard.append)
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            wakeups.absorb("legato_test_absorb", driver.get_server_pid())
            for payload in ("first", "second", "third"):
                await conn.execute(select(func.pg_notify("legato_test_absorb", payload)))
                await conn.commit()
        # One session's notifications arrive in commit order: once "third" is in, the
        # first was dropped and no absorb is left to drop another.
        await eventually(lambda: "third" in heard, "the third notification")
        assert heard == ["second", "third"]
        assert woken.is_set()
    finally:
        await wakeups.close()


@pytest.mark.parametrize("when", ["under way", "ended while settling", "ended before"])
async def test_a_decider_falling_asleep_keeps_only_the_absorbs_of_reports_that_may_notify(
    engine: AsyncEngine, when: str
) -> None:
    """A report written as one statement absorbs its NOTIFY before it is sent, and may
    wait on the sleep flags' locks while the decider's gate sets them, then notify: when
    that decider forgets the absorbs of reports that sent none, the absorb of a report
    under way, or that ended while the gate looked, must stay, or its NOTIFY wakes the
    decider a second time. One that ended before the gate looked is forgotten."""
    wakeups = Wakeups(engine)
    heard: list[str] = []
    channel = "legato_test_keep"
    reports = ReportsToDecider(wakeups, lambda keys: None, lambda: None)
    try:
        await wakeups.subscribe(channel, heard.append)
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            pid = driver.get_server_pid()
            if when == "under way":
                with reports.committing() as absorbed, reports.settling():
                    absorbed.append(reports.absorb_backend(pid, channel))
                    wakeups.forget_absorbed(channel, reports.absorbs_to_keep())
            elif when == "ended while settling":
                with reports.settling():
                    with reports.committing() as absorbed:
                        absorbed.append(reports.absorb_backend(pid, channel))
                    wakeups.forget_absorbed(channel, reports.absorbs_to_keep())
            else:
                with reports.committing() as absorbed:
                    absorbed.append(reports.absorb_backend(pid, channel))
                with reports.settling():
                    wakeups.forget_absorbed(channel, reports.absorbs_to_keep())
            for payload in ("report", "next"):
                await conn.execute(select(func.pg_notify(channel, payload)))
                await conn.commit()
        await eventually(lambda: "next" in heard, "the next notification")
        assert heard == (["report", "next"] if when == "ended before" else ["next"])
    finally:
        await wakeups.close()


async def test_an_absorbed_notification_with_a_payload_drops_that_payload_only(
    engine: AsyncEngine,
) -> None:
    """A decision handing off attempts of two keys absorbs each key's queue NOTIFY: one
    absorbed per payload, the others heard."""
    wakeups = Wakeups(engine)
    heard: list[str] = []
    try:
        await wakeups.subscribe("legato_test_absorb", heard.append)
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            for key in ("3", "5"):
                wakeups.absorb("legato_test_absorb", driver.get_server_pid(), key)
            for payload in ("1", "3", "5", "3", "last"):
                await conn.execute(select(func.pg_notify("legato_test_absorb", payload)))
                await conn.commit()
        await eventually(lambda: "last" in heard, "the last notification")
        assert heard == ["1", "3", "last"]
    finally:
        await wakeups.close()
