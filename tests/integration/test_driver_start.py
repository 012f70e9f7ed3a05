"""``Client.start`` and ``Client.signal`` on the asyncpg driver connection
(legato/engine/transport/driver.py): durable before they return, no transaction left open, the
errors of the SQLAlchemy path when the server closes or kills the connection, and a
signal's typed errors when no read comes before it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    DatabaseUnavailable,
    Flow,
    Node,
    RunFinished,
    RunNotFound,
    RunStatus,
    TaskContext,
    task,
    uuid7,
    workflow,
)
from legato.db import create_engine
from legato.schema import DecideQueue, RunEvents, Runs, Signals
from tests.helpers import count_rows, eventually


@task()
async def noop(ctx: TaskContext, n: int) -> int:
    return n


@workflow("driver.one")
def one(flow: Flow[int]) -> Node[int]:
    return flow.run(noop, flow.input)


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=App([one])) as client:
        await client.start(one, 0)  # stores the spec: later starts take the driver path
        yield client


@pytest_asyncio.fixture
async def admin(database_url: str) -> AsyncIterator[AsyncEngine]:
    admin = create_engine(database_url, "legato", isolation_level="AUTOCOMMIT")
    yield admin
    await admin.dispose()


async def _client_backends(admin: AsyncEngine) -> list[int]:
    async with admin.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        )
        return [int(pid) for (pid,) in rows]


async def test_a_start_is_committed_with_its_event_and_decide_row_when_it_returns(
    client: Client, admin: AsyncEngine
) -> None:
    handle = await client.start(one, 1)
    # Read from another connection at once: the start committed on its own.
    assert await count_rows(admin, Runs, Runs.id == handle.run_id) == 1
    assert await count_rows(admin, RunEvents, RunEvents.run_id == handle.run_id) == 1
    assert await count_rows(admin, DecideQueue, DecideQueue.run_id == handle.run_id) == 1
    assert (await client.get_run(handle.run_id)).run.status is RunStatus.RUNNING
    async with admin.connect() as conn:
        states = await conn.execute(
            text(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        )
        assert "idle in transaction" not in {state for (state,) in states}


async def test_a_start_replaces_pooled_connections_the_server_closed(
    client: Client, admin: AsyncEngine
) -> None:
    await client.start(one, 1)  # leaves its connection idle in the client's pool
    async with admin.connect() as conn:  # as a database restart would
        killed = await conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
        )
        assert killed.scalar_one() >= 1
    await eventually(lambda: _gone(admin), "the terminated backends to exit")
    handle = await client.start(one, 2)
    assert await count_rows(admin, Runs, Runs.id == handle.run_id) == 1


async def _gone(admin: AsyncEngine) -> bool:
    return not await _client_backends(admin)


async def test_a_connection_lost_mid_start_is_database_unavailable_and_writes_nothing(
    client: Client, admin: AsyncEngine
) -> None:
    before = await count_rows(admin, Runs)
    async with admin.connect() as blocker:
        # The start's insert into decide_queue waits on this lock, in flight.
        await blocker.execute(text("BEGIN"))
        await blocker.execute(text("LOCK TABLE legato.decide_queue IN ACCESS EXCLUSIVE MODE"))
        start = asyncio.create_task(client.start(one, 3))
        async with admin.connect() as conn:
            waiting = text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )

            async def blocked() -> bool:
                return (await conn.execute(waiting)).first() is not None

            await eventually(blocked, "the start to wait on the lock")
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        with pytest.raises(DatabaseUnavailable, match="may or may not have committed"):
            await start
        await blocker.execute(text("ROLLBACK"))
    assert await count_rows(admin, Runs) == before
    # The dead connection left the pool: the next start takes a live one.
    handle = await client.start(one, 4)
    assert await count_rows(admin, Runs, Runs.id == handle.run_id) == 1


async def test_a_signal_from_a_client_without_an_app_is_one_statement_with_typed_errors(
    client: Client, engine: AsyncEngine, admin: AsyncEngine
) -> None:
    running = await client.start(one, 5)
    finished = await client.start(one, 6)
    async with admin.connect() as conn:
        await conn.execute(
            text("UPDATE legato.runs SET status = 'CANCELLED', finished_at = now() WHERE id = :id"),
            {"id": finished.run_id},
        )
    async with Client(engine) as bare:  # no app: nothing to check the payload against
        await bare.signal(running.run_id, "go", {"n": 1})
        assert await count_rows(admin, Signals, Signals.run_id == running.run_id) == 1
        with pytest.raises(RunNotFound, match="no run"):
            await bare.signal(uuid7(), "go", None)
        with pytest.raises(RunFinished, match="already CANCELLED"):
            await bare.signal(finished.run_id, "go", None)
    assert await count_rows(admin, Signals) == 1
