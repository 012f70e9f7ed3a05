"""Supervision and outages: crashed loops and side tasks restart (or fail the Runtime),
database errors are retried, start-up waits for the database, and connection failures
are ``DatabaseUnavailable``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, DatabaseUnavailable, LoopFailed, Runtime, migrations
from legato.db import create_engine
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.transport.wakeups import Wakeups
from legato.runtime import Roles
from tests.e2e import flows
from tests.integration.test_cli_runtime import legato, one_line_error

FAST = RestartPolicy(max_restarts=2, first_delay=0.05, max_delay=0.2)
REFUSED = "postgresql://postgres@127.0.0.1:1/nowhere"


def _failing(times: int, error: Exception, then: Callable[[], Awaitable[Any]]) -> Any:
    """A stand-in for a method: raises ``error`` the first ``times`` calls, then delegates."""
    calls: list[int] = []

    async def method() -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return await then()

    method.calls = calls  # type: ignore[attr-defined]
    return method


async def _until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _sweeper(runtime: Runtime) -> Loop:
    """The runtime's lease sweeper: its loops are built in ``start()``, which returns
    before any of them has run (patched right after it, no tick is missed)."""
    (sweeper,) = [loop for loop in runtime.loops if loop.name == "lease-sweeper"]
    return sweeper


async def test_a_crashed_loop_is_restarted_and_a_database_error_only_retried(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime(engine, flows.app, roles=Roles(decider=False, worker=False), restarts=FAST)
    caplog.set_level(logging.INFO, logger="legato")
    await runtime.start()
    sweeper = _sweeper(runtime)
    bug = _failing(2, RuntimeError("boom"), sweeper.tick)
    sweeper.tick = bug  # type: ignore[method-assign]
    timer = next(loop for loop in runtime.loops if loop.name == "timer")
    outage = _failing(3, ConnectionRefusedError("refused"), timer.tick)
    timer.tick = outage  # type: ignore[method-assign]
    await _until(lambda: len(bug.calls) > 3 and len(outage.calls) > 4, "ticks after the failures")
    await runtime.stop()  # healthy again: nothing to raise
    crashes = [r for r in caplog.records if "lease-sweeper loop crashed" in r.getMessage()]
    assert [r.levelno for r in crashes] == [logging.ERROR, logging.ERROR]
    assert all(r.exc_info is not None for r in crashes)  # a bug shows its traceback
    retried = [r for r in caplog.records if r.getMessage().startswith("timer: tick failed")]
    assert len(retried) == 3
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in retried)
    assert "the database is unavailable (connection refused)" in retried[0].getMessage()
    assert not [r for r in caplog.records if "timer loop crashed" in r.getMessage()]


async def test_a_loop_that_keeps_crashing_fails_the_runtime(engine: AsyncEngine) -> None:
    runtime = Runtime(engine, flows.app, roles=Roles(decider=False, worker=False), restarts=FAST)
    await runtime.start()
    sweeper = _sweeper(runtime)
    sweeper.tick = _failing(99, RuntimeError("boom"), sweeper.tick)  # type: ignore[method-assign]
    await asyncio.wait_for(runtime.wait(), timeout=20)  # every loop stopped
    assert all(loop.stopping for loop in runtime.loops)
    with pytest.raises(
        LoopFailed, match=r"lease-sweeper loop crashed 3 times .*RuntimeError: boom"
    ):
        await runtime.stop()
    await runtime.stop()  # raised once


async def test_the_worker_lease_keeper_is_supervised(engine: AsyncEngine) -> None:
    runtime = Runtime(
        engine,
        flows.app,
        roles=Roles(decider=False, timer=False),
        lease=timedelta(seconds=0.3),
        restarts=FAST,
    )
    await runtime.start()  # builds the worker; it has not run yet
    worker = runtime.worker
    assert worker is not None
    once = _failing(1, RuntimeError("lease bug"), worker.extend_leases)
    worker.extend_leases = once  # type: ignore[method-assign]
    await _until(lambda: len(once.calls) >= 3, "the lease keeper to run again after its crash")
    await runtime.stop()

    runtime = Runtime(
        engine,
        flows.app,
        roles=Roles(decider=False, timer=False),
        lease=timedelta(seconds=0.3),
        restarts=FAST,
        poll_interval=0.1,
    )
    async with asyncio.timeout(20):
        await runtime.start()
        assert runtime.worker is not None
        runtime.worker.extend_leases = _failing(  # type: ignore[method-assign]
            99, RuntimeError("lease bug"), runtime.worker.extend_leases
        )
        await runtime.wait()
    with pytest.raises(LoopFailed, match="worker lease keeper crashed 3 times"):
        await runtime.stop()


async def test_a_refused_report_flush_is_retried_and_names_its_runs(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The database refuses the first flush of a finished attempt (as a deadlock victim
    is refused): the worker keeps the report, says which runs in one line, and the run
    finishes once the retry commits."""
    async with engine.begin() as conn:
        await conn.exec_driver_sql("CREATE SEQUENCE legato.test_flushes")
        await conn.exec_driver_sql("""
CREATE FUNCTION legato.test_refuse_first_flush() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('legato.test_flushes') = 1 THEN
    RAISE EXCEPTION 'refused for the test' USING ERRCODE = '40P01';
  END IF;
  RETURN OLD;
END $$""")
        await conn.exec_driver_sql(
            "CREATE TRIGGER test_refuse_first_flush BEFORE DELETE ON legato.task_queue "
            "FOR EACH ROW EXECUTE FUNCTION legato.test_refuse_first_flush()"
        )
    caplog.set_level(logging.WARNING, logger="legato")
    runtime = Runtime(engine, flows.app, poll_interval=0.1)
    await runtime.start()
    try:
        async with Client(engine) as client:  # closed: its LISTEN connection goes back
            handle = await client.start(flows.chain, 3)
            assert await handle.result(timeout=30) == 9  # (3 + 1) * 2 + 1
    finally:
        await runtime.stop()
    refused = [r.getMessage() for r in caplog.records if "reporting" in r.getMessage()]
    assert len(refused) == 1, refused
    assert str(handle.run_id) in refused[0] and "refused for the test" in refused[0]
    assert "retrying in" in refused[0]


async def test_listening_starts_once_the_database_answers(database_url: str) -> None:
    attempts: list[int] = []
    dsn = database_url.replace("postgresql+asyncpg://", "postgresql://")

    async def creator() -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionRefusedError("the database is not up yet")
        return await asyncpg.connect(dsn)

    engine = create_engine(database_url, "legato", async_creator=creator)
    wakeups = Wakeups(engine)
    try:
        event = await wakeups.subscribe("legato_test_late")  # does not raise
        await wakeups.ensure_listening()
        async with engine.begin() as conn:
            await conn.execute(select(func.pg_notify("legato_test_late", "")))
        await asyncio.wait_for(event.wait(), timeout=5)
    finally:
        await wakeups.close()
        await engine.dispose()


async def test_start_up_waits_for_the_database(database_url: str) -> None:
    attempts: list[int] = []
    dsn = database_url.replace("postgresql+asyncpg://", "postgresql://")

    async def creator() -> Any:
        attempts.append(1)
        if len(attempts) <= 2:
            raise ConnectionRefusedError("the database is not up yet")
        return await asyncpg.connect(dsn)

    engine = create_engine(database_url, "legato", async_creator=creator)
    runtime = Runtime(engine, flows.app, roles=Roles(worker=False), startup_timeout=30)
    try:
        await runtime.start()
        assert len(attempts) >= 3
        await runtime.stop()
    finally:
        await engine.dispose()


async def test_start_up_gives_up_after_its_timeout() -> None:
    engine = create_engine(REFUSED, "legato")
    runtime = Runtime(engine, flows.app, startup_timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseUnavailable, match=r"127\.0\.0\.1:1/nowhere"):
            await runtime.start()
    finally:
        await engine.dispose()
    assert time.monotonic() - started >= 1.0


@pytest.mark.parametrize(
    "url",
    [REFUSED, "postgresql://postgres@no-such-host.invalid:5432/app"],
    ids=["refused", "unknown-host"],
)
async def test_client_and_migrations_raise_database_unavailable(url: str) -> None:
    with pytest.raises(DatabaseUnavailable, match="cannot reach the database at"):
        await Client.connect(url)
    engine = create_engine(url, "legato")
    try:
        with pytest.raises(DatabaseUnavailable):
            await migrations.upgrade(engine, "legato")
    finally:
        await engine.dispose()


async def test_an_unknown_database_is_not_retried(database_url: str) -> None:
    missing = (
        database_url.rsplit("/", 1)[0] + "/no_such_database" + "?" + database_url.split("?", 1)[1]
    )
    engine = create_engine(missing, "legato")
    runtime = Runtime(engine, flows.app, startup_timeout=30)
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseUnavailable, match="no_such_database") as raised:
            await runtime.start()
    finally:
        await engine.dispose()
    assert not raised.value.retryable
    assert time.monotonic() - started < 5
    with pytest.raises(DatabaseUnavailable, match="check the user, password and database"):
        await Client.connect(missing)


async def test_cli_processes_say_the_database_is_unreachable_in_one_line() -> None:
    quiet = await legato(
        REFUSED,
        "worker",
        "--app",
        "tests.e2e.flows:app",
        "--startup-timeout",
        "0",
        "--log-level",
        "ERROR",
    )
    one_line_error(quiet, "cannot reach the database at 127.0.0.1:1/nowhere")
    started = time.monotonic()
    retried = await legato(REFUSED, "timer", "--startup-timeout", "1.5")
    assert time.monotonic() - started >= 1.5
    assert retried.rc == 1 and "Traceback" not in retried.err
    lines = retried.err.strip().splitlines()
    assert lines[-1].startswith("legato: error: cannot reach the database at 127.0.0.1:1")
    assert any("retrying for up to" in line for line in lines[:-1])
    bad = await legato(REFUSED, "worker", "--app", "tests.e2e.flows:app", "--lease", "0")
    assert bad.rc == 2 and "not a lease of at least 1 second: '0'" in bad.err
