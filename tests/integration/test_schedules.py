"""Schedules and run timeouts on a real PostgreSQL: three decider processes fire each
tick once, catch up by policy after downtime; the CLI pauses, resumes and triggers;
a run past its execution_timeout finishes TIMED_OUT with its attempt cancelled."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, RunFailed, RunStatus, Runtime, TaskState
from legato.engine.loops import schedules as scheduling
from legato.engine.repositories import schedules
from legato.schema import Runs
from tests.integration.schedule_app import CANCELLED, SKIP_GRACE, Tick, stuck, stuck_app, tick
from tests.integration.test_cli_runtime import _spawn, _stop, legato_here, one_line_error

APP = "tests.integration.schedule_app:app"
DECIDER_POLL = timedelta(seconds=0.2)


async def _ticks(engine: AsyncEngine) -> dict[str, list[datetime]]:
    """Each schedule's fired ticks (from its runs' start keys), oldest first."""
    async with engine.connect() as conn:
        keys = (await conn.execute(select(Runs.idempotency_key))).scalars().all()
    fired: dict[str, list[datetime]] = defaultdict(list)
    for key in keys:
        assert key is not None and key.startswith("schedule:")
        _, name, moment = key.split(":", 2)
        fired[name].append(datetime.fromisoformat(moment))
    return {name: sorted(ticks) for name, ticks in fired.items()}


Fired = dict[str, list[datetime]]


async def _wait_for(
    engine: AsyncEngine, done: Callable[[Fired], bool], timeout: float = 60
) -> Fired:
    deadline = time.monotonic() + timeout
    while True:
        fired = await _ticks(engine)
        if done(fired):
            return fired
        assert time.monotonic() < deadline, f"timed out; fired so far: {fired}"
        await asyncio.sleep(0.2)


async def _deciders(
    database_url: str, engine: AsyncEngine, count: int = 3
) -> list[asyncio.subprocess.Process]:
    """``count`` decider processes, returned once each is listening: a process stopped
    while still importing would die of the SIGTERM instead of stopping gracefully."""
    processes = [
        await _spawn(
            database_url,
            "decider",
            "--app",
            APP,
            "--poll-interval",
            str(DECIDER_POLL.total_seconds()),
        )
        for _ in range(count)
    ]
    deadline = time.monotonic() + 60
    while await _listening(engine) < count:
        assert time.monotonic() < deadline, f"only {await _listening(engine)} deciders started"
        await asyncio.sleep(0.1)
    return processes


async def _listening(engine: AsyncEngine) -> int:
    """Processes holding a LISTEN connection to this database (one per decider; their
    signal handlers are installed before they connect)."""
    async with engine.connect() as conn:
        listening = await conn.execute(
            text(
                "SELECT count(DISTINCT pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
            )
        )
        return int(listening.scalar_one())


async def _stop_all(processes: list[asyncio.subprocess.Process]) -> None:
    for rc, err in await asyncio.gather(*(_stop(p) for p in processes)):
        assert rc == 0, err


@pytest.mark.slow
async def test_three_deciders_fire_each_tick_once_and_catch_up_by_policy(
    database_url: str, engine: AsyncEngine
) -> None:
    deciders = await _deciders(database_url, engine)
    try:
        await _wait_for(engine, lambda f: len(f.get("all", [])) >= 4)
    finally:
        await _stop_all(deciders)
    down_from = datetime.now(UTC)
    # Downtime: no decider runs, so these ticks are missed.
    await asyncio.sleep(5)
    restart = datetime.now(UTC)
    deciders = await _deciders(database_url, engine)
    try:
        fired = await _wait_for(
            engine,
            lambda f: (
                max(f.get("all", [restart])) > restart + timedelta(seconds=2)
                and max(f.get("skip", [restart])) > restart
            ),
        )
    finally:
        await _stop_all(deciders)
    fired = await _ticks(engine)
    async with engine.connect() as conn:
        total = len((await conn.execute(select(Runs.id))).all())
    assert total == sum(len(ticks) for ticks in fired.values()), "one run per key"
    for name, ticks in fired.items():
        assert len(set(ticks)) == len(ticks), f"{name} fired a tick twice"

    def missed(name: str, until: datetime = restart) -> list[datetime]:
        return [t for t in fired[name] if down_from < t <= until]

    # ALL: every tick from the first to the last, the missed ones included.
    ticks = fired["all"]
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))]
    assert len(missed("all")) >= 4
    # ALL bounded to 2, ONCE, SKIP: at most 2, at most 1, none of the missed ticks
    # (SKIP may fire a tick no older than its grace when the deciders came back).
    assert len(missed("bounded")) <= 2
    assert len(missed("once")) <= 1
    assert missed("skip", restart - SKIP_GRACE - DECIDER_POLL) == []
    # And each resumed firing each tick after the restart.
    for name in ("bounded", "once"):
        assert max(fired[name]) > restart + timedelta(seconds=1)


async def test_cli_lists_pauses_resumes_and_triggers(
    database_url: str, engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    env = ("--database-url", database_url)
    assert (await legato_here(capsys, "deploy", "--app", APP, *env)).rc == 0
    listing = await legato_here(capsys, "schedules", "list", *env)
    assert listing.rc == 0
    lines = listing.out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "WORKFLOW", "WHEN", "CATCH-UP"]
    assert [line.split()[0] for line in lines[1:]] == ["all", "bounded", "once", "skip"]
    assert "every 2s" in lines[4] and "active" in lines[4]

    paused = await legato_here(capsys, "schedules", "pause", "all", *env)
    assert paused.rc == 0 and "paused" in paused.out
    assert "paused" in (await legato_here(capsys, "schedules", "list", *env)).out
    later = datetime.now(UTC) + timedelta(seconds=5)
    async with engine.begin() as conn:
        await scheduling.fire_due(conn, later, 100, timedelta(0))
    fired = await _ticks(engine)
    assert "all" not in fired, "a paused schedule fired"
    assert fired["once"] and fired["bounded"]

    resumed = await legato_here(capsys, "schedules", "resume", "all", *env)
    assert resumed.rc == 0 and "next fire" in resumed.out
    async with engine.begin() as conn:
        await scheduling.fire_due(conn, datetime.now(UTC) + timedelta(seconds=3), 100, timedelta(0))
    assert (await _ticks(engine))["all"]

    triggered = await legato_here(capsys, "schedules", "trigger", "skip", *env)
    assert triggered.rc == 0
    async with Client(engine) as client:
        run = (await client.get_run(triggered.out.strip())).run
    assert run.workflow_name == "sched.tick" and run.input == {"label": "skip"}

    for command in ("pause", "resume", "trigger"):
        done = await legato_here(capsys, "schedules", command, "nope", *env)
        one_line_error(done, "unknown schedule 'nope'", "'all'")


async def test_run_timeout_fails_a_stuck_run_timed_out_and_cancels_its_attempt(
    engine: AsyncEngine,
) -> None:
    CANCELLED.clear()
    async with Runtime(engine, stuck_app, poll_interval=0.2) as _, Client(engine) as client:
        handle = await client.start(stuck, Tick(label="stuck"))
        with pytest.raises(RunFailed, match=r"RunTimedOut: .*'sched.stuck'.*execution_timeout"):
            await handle.result(timeout=60)
        details = await client.get_run(handle.run_id)
        await asyncio.wait_for(CANCELLED.wait(), 30)
    assert details.run.status is RunStatus.TIMED_OUT
    states = {task.node_id: task.state for task in details.tasks}
    assert states == {"hang": TaskState.CANCELLED, "never": TaskState.CANCELLED}


async def test_a_grace_shorter_than_the_poll_interval_drops_no_tick_a_poll_reached(
    engine: AsyncEngine,
) -> None:
    """grace=0 with a 1 s poll: the tick a poll finds 0.9 s late fires (the poll's own
    lateness is not "missed"); one found later than grace plus a poll interval is
    skipped, as a decider outage's is."""
    prompt = tick.schedule(
        "prompt", every=timedelta(hours=1), grace=timedelta(0), input=Tick(label="p")
    )
    try:
        async with Client(engine) as client:
            await client.deploy(App([tick]))
    finally:
        del tick.schedules["prompt"]  # the module's app keeps its four schedules
    async with engine.connect() as conn:
        stored = await schedules.get(conn, prompt.name)
    assert stored is not None
    first = stored.next_fire_at
    poll = 1.0

    def at(moment: datetime) -> scheduling.ScheduleLoop:
        return scheduling.ScheduleLoop(engine, poll_interval=poll, clock=lambda: moment)

    await at(first + timedelta(seconds=0.9)).tick()
    assert (await _ticks(engine))["prompt"] == [first]
    second = first + timedelta(hours=1)
    await at(second + timedelta(seconds=poll + 0.1)).tick()  # past grace + one poll
    assert (await _ticks(engine))["prompt"] == [first]
    async with engine.connect() as conn:
        moved = await schedules.get(conn, prompt.name)
    assert moved is not None and moved.next_fire_at == second + timedelta(hours=1)
