"""start_run_v1() in SQL: a trigger starts runs in the caller's transaction, with the shard
key Shards computes, and a bad input fails the run with a typed InvalidInput error."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from legato import (
    Client,
    RunFailed,
    RunStatus,
    Runtime,
    migrations,
)
from legato.db import create_engine
from legato.db.urls import resolve_url
from legato.schema import Shards
from legato.ui import create_app
from tests.sql_start_app import app

# The application's own table, in its own schema, and the trigger of docs/api.md.
APPLICATION_DDL = (
    "CREATE TABLE public.orders (id int PRIMARY KEY, email text NOT NULL, tenant text)",
    """
CREATE FUNCTION public.orders_start_receipt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM legato.start_run_v1(
        'receipt',
        jsonb_build_object('order_id', NEW.id, 'email', NEW.email),
        idempotency_key => 'receipt:' || NEW.id,
        shard_key => NEW.tenant
    );
    RETURN NEW;
END;
$$""",
    "CREATE TRIGGER orders_start_receipt AFTER INSERT ON public.orders "
    "FOR EACH ROW EXECUTE FUNCTION public.orders_start_receipt()",
)


@pytest.fixture
async def user_engine(database_url: str, engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """The application's engine (its own schema), with the workflow deployed."""
    async with Client(engine) as client:
        await client.deploy(app)
    user = create_async_engine(resolve_url(database_url))
    async with user.begin() as conn:
        for statement in APPLICATION_DDL:
            await conn.exec_driver_sql(statement)
    yield user
    await user.dispose()


async def _count(conn: AsyncConnection, table: str) -> int:
    return int((await conn.execute(text(f"SELECT count(*) FROM legato.{table}"))).scalar_one())


async def _start(conn: AsyncConnection, sql: str, **params: object) -> uuid.UUID:
    started = (await conn.execute(text(f"SELECT legato.start_run_v1({sql})"), params)).scalar_one()
    assert isinstance(started, uuid.UUID)
    return started


async def test_a_rolled_back_trigger_starts_nothing(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with user_engine.connect() as conn:
        transaction = await conn.begin()
        await conn.execute(text("INSERT INTO orders VALUES (1, 'ada@example.com', 'acme')"))
        assert await _count(conn, "runs") == 1  # inside the transaction, it is there
        await transaction.rollback()
    async with engine.connect() as conn:
        for table in ("runs", "run_events", "decide_queue", "idempotency_keys"):
            assert await _count(conn, table) == 0, table


async def test_committed_trigger_starts_run_and_the_runs_finish(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with user_engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO orders VALUES (1, 'ada@example.com', 'acme'), "
                "(2, 'bob@example.com', NULL)"
            )
        )
    async with Client(engine) as client, Runtime(engine, app, poll_interval=0.1):
        page = await client.list_runs(workflow="receipt")
        outputs = sorted([await client.result(run.id, timeout=30) for run in page.runs], key=str)
    assert outputs == [
        {"order_id": 1, "sent_to": "ada@example.com"},
        {"order_id": 2, "sent_to": "bob@example.com"},
    ]


async def test_the_idempotency_key_returns_the_first_run(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with user_engine.begin() as conn:
        first = await _start(
            conn, "'receipt', CAST(:input AS jsonb), idempotency_key => 'k'", input='{"a": 1}'
        )
        again = await _start(
            conn, "'receipt', CAST(:input AS jsonb), idempotency_key => 'k'", input='{"a": 2}'
        )
        assert again == first
        assert await _count(conn, "runs") == 1
    # The key is the one Client.start takes: a client start with it finds the same run.
    async with Client(engine) as client:
        handle = await client.start("receipt", {"a": 3}, idempotency_key="k")
    assert handle.run_id == first


@pytest.mark.parametrize("count", [16, 7])
async def test_the_shard_key_is_the_one_shards_computes(
    empty_database_url: str, count: int
) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        await migrations.upgrade(engine, "legato", shard_count=count)
        async with Client(engine) as client:
            await client.deploy(app)
        shards = Shards(count)
        tenants = [f"tenant-{i}" for i in range(40)] + ["ünïcode", "a" * 200]
        async with engine.begin() as conn:
            for tenant in tenants:
                run_id = await _start(conn, "'receipt', shard_key => :key", key=tenant)
                assert shards.of_run(run_id) == shards.of_key(tenant)
            for i in range(40):
                key = f"order:{i}"
                run_id = await _start(conn, "'receipt', idempotency_key => :key", key=key)
                assert shards.of_run(run_id) == shards.of_key(key)
            unkeyed = [await _start(conn, "'receipt'") for _ in range(40)]
            stored: dict[uuid.UUID, int] = {
                row[0]: row[1]
                for row in await conn.execute(text("SELECT id, shard FROM legato.runs"))
            }
            keys: dict[uuid.UUID, int] = {
                row[0]: row[1]
                for row in await conn.execute(
                    text("SELECT run_id, shard FROM legato.idempotency_keys")
                )
            }
        # Every row of a run carries the key its id says, as the decider will look it up.
        assert all(stored[run_id] == shards.of_run(run_id) for run_id in stored)
        assert all(keys[run_id] == stored[run_id] for run_id in keys)
        assert len({shards.of_run(run_id) for run_id in unkeyed}) > 1  # spread by the id
        # The ids stay time-ordered UUIDv7s.
        assert all(run_id.version == 7 for run_id in stored)
    finally:
        await engine.dispose()


async def test_a_delay_holds_the_first_decision(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with user_engine.begin() as conn:
        run_id = await _start(conn, "'receipt', delay => interval '1 hour'")
        waits = (
            await conn.execute(
                text(
                    "SELECT q.available_at - now(), r.scheduled_at - now() "
                    "FROM legato.decide_queue q JOIN legato.runs r ON r.id = q.run_id "
                    "WHERE r.id = :id"
                ),
                {"id": run_id},
            )
        ).one()
    assert [wait.total_seconds() for wait in waits] == [3600.0, 3600.0]


@pytest.mark.parametrize(
    ("call", "message", "hint"),
    [
        ("'no_such_flow'", "unknown workflow 'no_such_flow'", "deployed now: receipt"),
        ("''", "needs a workflow name", "start_run_v1('signup'"),
        ("'receipt', delay => interval '-1 second'", "is negative", "zero or more"),
        ("'receipt', delay => 'infinity'", "delay infinity is not finite", "a finite delay"),
        ("'receipt', delay => '-infinity'", "delay -infinity is not finite", "a finite delay"),
        (
            "'receipt', delay => interval '1000000 years'",
            "delay 1000000 years is over the 3660-day limit",
            "at most 3660 days",
        ),
        ("repeat('w', 100000)", "workflow 'wwwwwwwwww", "the name a workflow was deployed"),
        ("E're\\x01ceipt'", "is not a workflow name", "the name a workflow was deployed"),
        ("'receipt', shard_key => E'a\\nb'", "contains a control character", "printable"),
        ("'receipt', idempotency_key => E'k\\x07'", "contains a control character", "printable"),
        ("'receipt', shard_key => ''", "shard_key '' must be", "tenant or account id"),
        ("'receipt', idempotency_key => ''", "idempotency_key '' must be", "makes the start"),
        (
            "'receipt', (repeat('[', 101) || repeat(']', 101))::jsonb",
            "nests arrays and objects more than 100 levels deep",
            "a flatter value",
        ),
        (
            """'receipt', ('{"email": "a", "x": ' || repeat('[', 3000) || repeat(']', 3000)"""
            """ || '}')::jsonb""",
            "more than 100 levels deep",
            "a flatter value",
        ),
        (
            """'receipt', ('{"n": 1' || repeat('0', 5000) || '}')::jsonb""",
            "a number of more than 4299 digits",
            "as a string",
        ),
        (
            "'receipt', to_jsonb(repeat('x', 1048576))",
            "over the 1048576-byte limit",
            "a table of your own",
        ),
    ],
)
async def test_a_bad_call_raises_with_a_hint_and_writes_nothing(
    engine: AsyncEngine, user_engine: AsyncEngine, call: str, message: str, hint: str
) -> None:
    async with user_engine.connect() as conn:
        with pytest.raises(DBAPIError) as raised:
            await conn.execute(text(f"SELECT legato.start_run_v1({call})"))
        await conn.rollback()
    error = raised.value.orig
    assert message in str(error)
    assert hint in str(getattr(error, "__cause__", None).hint)  # type: ignore[union-attr]
    async with engine.connect() as conn:
        assert await _count(conn, "runs") == 0


async def test_a_bad_input_fails_the_run_with_invalid_input_naming_the_field(
    engine: AsyncEngine, user_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    async with user_engine.begin() as conn:
        bad = await _start(
            conn, "'receipt', CAST(:input AS jsonb)", input='{"order_id": "seven", "mail": "x"}'
        )
        good = await _start(
            conn, "'receipt', CAST(:input AS jsonb)", input='{"order_id": 7, "email": "c@d.e"}'
        )
    caplog.set_level(logging.INFO, logger="legato.decider")
    async with Client(engine) as client, Runtime(engine, app, poll_interval=0.1):
        with pytest.raises(RunFailed) as failed:
            await client.result(bad, timeout=30)
        assert await client.result(good, timeout=30) == {"order_id": 7, "sent_to": "c@d.e"}
        details = await client.get_run(bad)
        history = await client.history(bad)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(client)),
            base_url="http://127.0.0.1:8080",
        ) as browser:
            page = await browser.get(f"/runs/{bad}")
    error = failed.value.error
    assert error is not None
    assert error.type == "InvalidInput"
    for field in ("order_id", "email"):
        assert f"field {field!r}" in error.message
    assert details.run.status is RunStatus.FAILED
    assert details.tasks == []  # no task ever saw the bad input
    final = history[-1]
    assert final.type == "run_failed"
    assert final.data["fields"] == ["order_id", "email"]  # type: ignore[index,call-overload]
    logged = [r.getMessage() for r in caplog.records if str(bad) in r.getMessage()]
    assert any("FAILED" in line and "InvalidInput" in line for line in logged), logged
    # The run page shows the error with the fields it names.
    assert page.status_code == 200
    assert "InvalidInput" in page.text
    assert "field &#39;order_id&#39;" in page.text
