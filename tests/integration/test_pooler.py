"""Legato behind Debian's PgBouncer in transaction mode, in front of the session's server:
every node kind, signals, timers and a killed worker, with wake-ups on a direct listen
connection and with polling alone."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFailed, Runtime, TaskState
from legato.db import create_engine
from legato.runtime import Roles
from legato.testing.database import pgbouncer_binary, running_pgbouncer
from legato.ui import app as ui_app
from tests.e2e import flows
from tests.e2e.flows import Account, Approval, Confirmed, Plan, Signup
from tests.helpers import eventually, started_processes


@pytest.fixture(scope="session")
def pgbouncer_url(pg_server_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the session's server."""
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with running_pgbouncer(pg_server_url) as url:
        yield url


@pytest.fixture
def pooled_url(pgbouncer_url: str, database_url: str) -> str:
    """The test's database, through the pooler."""
    database = make_url(database_url).database
    return make_url(pgbouncer_url).set(database=database).render_as_string(hide_password=False)


def _pooled_engine(pooled_url: str, **options: Any) -> AsyncEngine:
    return create_engine(pooled_url, "legato", pooler="transaction", **options)


@pytest_asyncio.fixture
async def pooled_engine(pooled_url: str, database_url: str) -> AsyncIterator[AsyncEngine]:
    """Every statement through the pooler; LISTEN straight to the server."""
    engine = _pooled_engine(pooled_url, listen_url=database_url)
    yield engine
    await engine.dispose()


@pytest_asyncio.fixture
async def pooled(pooled_engine: AsyncEngine) -> AsyncIterator[Client]:
    """Every loop and a client, through the pooler."""
    for state in (flows.FLAKY_CALLS, flows.CALLS, flows.HANDLED):
        state.clear()
    async with (
        Runtime(pooled_engine, flows.app, poll_interval=0.2, grace_period=2.0),
        Client(pooled_engine, app=flows.app) as client,
    ):
        yield client


async def test_every_node_kind_runs_through_a_transaction_pooler(pooled: Client) -> None:
    chain = await pooled.start(flows.chain, 1)
    branch = await pooled.start(flows.branching, Account(name="ada", plan=Plan.PRO))
    mapped = await pooled.start(flows.fanout, "one two three")
    child = await pooled.start(flows.parent, 4)
    retried = await pooled.start(flows.retrying, "k1")
    slept = await pooled.start(flows.sleepy, "nap")
    failed = await pooled.start(flows.compensated, 7)
    assert await chain.result(timeout=30) == 5
    assert await branch.result(timeout=30) == "welcome ada"
    assert await mapped.result(timeout=30) == ["ONE", "TWO", "THREE"]
    assert await child.result(timeout=30) == 22
    assert await retried.result(timeout=30) == "k1 ok after 3 calls"
    assert await slept.result(timeout=30) == "nap"
    with pytest.raises(RunFailed, match="cannot handle 7"):
        await failed.result(timeout=30)
    assert len(flows.HANDLED) == 1  # the failure handler ran


async def test_signals_and_event_timers_through_a_transaction_pooler(pooled: Client) -> None:
    signed = await pooled.start(flows.signup, Signup(email="ada@example.com"))
    await pooled.signal(signed.run_id, "signup.confirmed", Confirmed(code="c0de"))
    buffered = await pooled.start(flows.late_wait, "x")
    await pooled.signal(buffered.run_id, "approval", Approval(approved=True))
    timed_out = await pooled.start(flows.approval, "x")
    assert (await signed.result(timeout=30)).code == "c0de"
    assert await buffered.result(timeout=30) == Approval(approved=True)
    assert await timed_out.result(timeout=30) == Approval(approved=False)  # the timer fired


async def test_without_a_listen_url_the_loops_poll_and_say_so_once(
    pooled_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _pooled_engine(pooled_url)
    try:
        with caplog.at_level(logging.WARNING, logger="legato"):
            async with (
                Runtime(engine, flows.app, poll_interval=0.1),
                Client(engine, app=flows.app, poll_interval=0.1) as client,
            ):
                first = await client.start(flows.chain, 1)
                second = await client.start(flows.sleepy, "nap")
                assert await first.result(timeout=30) == 5
                assert await second.result(timeout=30) == "nap"
    finally:
        await engine.dispose()
    polling = [r for r in caplog.records if "the loops poll" in r.getMessage()]
    assert len(polling) == 1 and polling[0].levelno == logging.WARNING


async def test_a_worker_killed_mid_task_behind_the_pooler_is_finished_by_another(
    pooled_url: str, pooled_engine: AsyncEngine, tmp_path: Path
) -> None:
    behind_pooler = {"LEGATO_POOLER": "transaction"}  # and no listen URL: they poll
    with started_processes() as start:

        def spawn(role: str, *extra: str, env: dict[str, str] | None = None) -> Any:
            return start(
                "tests.e2e.procs",
                role,
                "--database-url",
                pooled_url,
                *extra,
                env={**behind_pooler, **(env or {})},
            )

        async with (
            Runtime(pooled_engine, flows.app, roles=Roles(decider=False, worker=False)),
            Client(pooled_engine, app=flows.app) as client,
        ):
            spawn("decider")
            victim = spawn("worker", "--lease", "1", env={flows.BLOCK_DIR_ENV: str(tmp_path)})
            handle = await client.start(flows.crashy_flow, "k9")
            marker = tmp_path / "k9"
            await eventually(marker.exists, "the task to start in the victim worker", timeout=30)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            spawn("worker", "--lease", "1")
            assert await handle.result(timeout=60) == "k9 done by attempt 2"
            details = await client.get_run(handle.run_id)
    attempts = sorted((t.attempt, t.state) for t in details.tasks)
    assert attempts == [(1, TaskState.TIMED_OUT), (2, TaskState.COMPLETED)]


async def test_each_transaction_through_the_pooler_carries_the_session_settings(
    pooled_engine: AsyncEngine,
) -> None:
    names = ("lock_timeout", "idle_in_transaction_session_timeout", "plan_cache_mode")
    async with pooled_engine.begin() as conn:
        shown = [(await conn.execute(text(f"SHOW {name}"))).scalar_one() for name in names]
    assert shown == ["30s", "5min", "force_generic_plan"]


async def test_the_dashboards_live_tail_is_woken_through_the_listen_url(
    pooled: Client, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ui_app, "LIVE_POLL_SECONDS", 3600.0)  # only a NOTIFY wakes the tail
    handle = await pooled.start(flows.signup, Signup(email="ada@example.com"))
    dashboard = ui_app.create_app(pooled)
    observer = create_engine(database_url, "legato")
    transport = httpx.ASGITransport(app=dashboard)
    try:
        async with (
            dashboard.router.lifespan_context(dashboard),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as web,
        ):
            tail = asyncio.create_task(web.get(f"/runs/{handle.run_id}/events"))

            async def listening() -> bool:
                async with observer.connect() as conn:
                    found = await conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE query LIKE 'LISTEN %events_v1%'"
                        )
                    )
                    return bool(found.scalar())

            await eventually(listening, "the dashboard to LISTEN for history")
            await pooled.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
            stream = await asyncio.wait_for(tail, 30)
    finally:
        await observer.dispose()
    assert stream.text.rstrip().endswith("event: end\ndata: finished")
