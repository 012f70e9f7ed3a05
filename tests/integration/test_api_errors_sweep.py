"""The last untyped errors, on a real database: each public entry point raises a typed,
exported ``LegatoError`` that names the value and what to do, and writes nothing."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    ConfigurationError,
    DatabaseUnavailable,
    Flow,
    IncompatibleDatabase,
    InvalidArgument,
    InvalidInput,
    InvalidRunId,
    LegatoError,
    Node,
    RunFilter,
    RunNotFound,
    TaskContext,
    migrations,
    task,
    workflow,
)
from legato.db import create_engine
from legato.engine.loops.timers import TimerLoop
from legato.outages import database_failure
from legato.schema import (
    DEFAULT_SHARD_COUNT,
    RunEvents,
    Runs,
    Shards,
    Signals,
    Tasks,
    WorkflowDefinitions,
)
from tests.helpers import run_legato
from tests.integration.test_cli_db import assert_one_line_error


@task()
async def double(ctx: TaskContext, n: int) -> int:
    return n * 2


@workflow("sweep.double")
def doubled(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.input)


app = App([doubled])

# A UUIDv7 whose 48-bit millisecond timestamp is the largest: the year 10889, past
# datetime's range.
LAST_UUID7 = uuid.UUID(int=((1 << 48) - 1) << 80 | 0x7 << 76 | 0b10 << 62 | 1)


async def _rows(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            table.table.name: int(
                (await conn.execute(select(func.count()).select_from(table.table))).scalar_one()
            )
            for table in (Runs, Tasks, RunEvents)
        }


async def _schemas(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        names = await conn.execute(text("SELECT nspname FROM pg_namespace"))
        return {str(name) for name in names.scalars()}


async def _version(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        found = await conn.execute(text("SELECT version_num FROM legato.legato_version"))
        return [str(v) for v in found.scalars()]


@pytest.mark.parametrize("run_id", [LAST_UUID7, str(LAST_UUID7)], ids=["uuid", "string"])
async def test_a_uuid7_at_the_end_of_the_timestamp_range_is_invalid_run_id(
    engine: AsyncEngine, run_id: uuid.UUID | str
) -> None:
    before = await _rows(engine)
    async with Client(engine, app=app) as client:
        with pytest.raises(InvalidRunId, match=r"after the year 9999.*use a current UUIDv7"):
            await client.start(doubled, 1, run_id=run_id)
    assert await _rows(engine) == before


Call = Callable[[Client], Awaitable[object]]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.list_runs(),
        lambda c: c.start(doubled, 1),
        lambda c: c.get_run(uuid.uuid4()),
        lambda c: c.deploy(app),
        lambda c: c.list_quarantined(),
        lambda c: c.emit("sweep.event"),
    ],
    ids=["list_runs", "start", "get_run", "deploy", "list_quarantined", "emit"],
)
async def test_a_client_on_a_schema_never_migrated_says_so_on_its_first_call(
    database_url: str, call: Call
) -> None:
    engine = create_engine(database_url, "never_migrated")
    try:
        async with Client(engine, app=app) as client:
            with pytest.raises(IncompatibleDatabase) as raised:
                await call(client)
        message = str(raised.value)
        assert "schema 'never_migrated' is at migration nothing" in message
        assert "legato db upgrade" in message
        assert "never_migrated" not in await _schemas(engine)
    finally:
        await engine.dispose()


async def test_following_a_run_on_a_schema_never_migrated_says_so(database_url: str) -> None:
    engine = create_engine(database_url, "never_migrated")
    try:
        async with Client(engine) as client:
            with pytest.raises(IncompatibleDatabase, match="legato db upgrade"):
                async for _ in client.follow(uuid.uuid4()):
                    pass
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("step", "revision", "fragment"),
    [
        (
            migrations.upgrade,
            "bogus",
            "cannot migrate schema 'legato' to migration revision 'bogus'",
        ),
        (migrations.upgrade, "0042", "to migration revision '0042'"),
        (migrations.downgrade, "bogus", "this package knows 0001"),
        (migrations.upgrade, "", "must be a non-empty string"),
        (migrations.upgrade, 7, "must be a non-empty string"),
    ],
    ids=["upgrade-bogus", "upgrade-future", "downgrade-bogus", "empty", "not-a-string"],
)
async def test_an_unknown_migration_revision_is_a_configuration_error(
    engine: AsyncEngine, step: Any, revision: object, fragment: str
) -> None:
    before = await _version(engine)
    with pytest.raises(ConfigurationError) as raised:
        await step(engine, "legato", revision)
    assert fragment in str(raised.value)
    assert await _version(engine) == before


async def _newer(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE legato.legato_version SET version_num = '0999'"))


NEWER = "schema 'legato' is at migration 0999, newer than this Legato package"


@pytest.mark.parametrize("step", [migrations.upgrade, migrations.downgrade])
async def test_migrating_a_schema_a_newer_legato_made_explains_as_db_check_does(
    engine: AsyncEngine, step: Any
) -> None:
    await _newer(engine)
    before = await _rows(engine)
    with pytest.raises(IncompatibleDatabase, match=NEWER):
        await step(engine, "legato")
    assert await _version(engine) == ["0999"]
    assert await _rows(engine) == before


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
async def test_db_upgrade_and_downgrade_on_a_newer_schema_say_what_db_check_says(
    database_url: str, engine: AsyncEngine, command: str
) -> None:
    await _newer(engine)
    check = await run_legato("db", "check", database_url=database_url)
    assert check.status == 1 and NEWER in check.stdout
    outcome = await run_legato("db", command, database_url=database_url)
    assert_one_line_error(outcome, NEWER, "upgrade the legato package")
    assert "Can't locate revision" not in outcome.stderr
    assert await _version(engine) == ["0999"]


@pytest.mark.parametrize("schema", ["pg_legato", "PG_temp", "information_schema", ""])
async def test_a_reserved_or_empty_schema_is_refused_before_anything_is_created(
    database_url: str, engine: AsyncEngine, schema: str
) -> None:
    before = await _schemas(engine)
    with pytest.raises(ConfigurationError, match="schema name"):
        await Client.connect(database_url, schema=schema)
    with pytest.raises(ConfigurationError, match="schema name"):
        await migrations.upgrade(engine, schema)
    with pytest.raises(ConfigurationError, match="schema name"):
        await migrations.state(engine, schema)
    assert await _schemas(engine) == before


async def test_an_outage_over_a_unix_socket_is_logged_as_the_database_unavailable(
    tmp_path: Path,
) -> None:
    url = f"postgresql://postgres@/app?host={tmp_path}"  # a directory with no server socket
    with pytest.raises(DatabaseUnavailable) as raised:
        await Client.connect(url)
    assert "no server socket in that directory" in str(raised.value)
    assert "Errno" not in str(raised.value)

    engine = create_engine(url)
    failed: list[str] = []
    logged = asyncio.Event()

    class TickFailures(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "tick failed" in record.getMessage():
                failed.append(record.getMessage())
                logged.set()

    handler = TickFailures()
    logging.getLogger("legato").addHandler(handler)
    loop = TimerLoop(engine, shards=Shards(DEFAULT_SHARD_COUNT))
    running = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(logged.wait(), timeout=20)
    finally:
        logging.getLogger("legato").removeHandler(handler)
        loop.stop()
        await running
        await engine.dispose()
    assert "the database is unavailable (no server socket in that directory)" in failed[0]
    assert "Errno" not in failed[0] and "FileNotFoundError" not in failed[0]


async def test_a_refused_connection_reads_the_same_in_errors_and_log_lines() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(OSError, match="Connect call failed") as raised:
            async with engine.connect():
                pass
        assert database_failure(raised.value) == "the database is unavailable (connection refused)"
        with pytest.raises(
            DatabaseUnavailable, match=r"127\.0\.0\.1:1/nowhere: connection refused"
        ):
            await Client.connect("postgresql://postgres@127.0.0.1:1/nowhere")
    finally:
        await engine.dispose()


@workflow("sweep.wait")
def waits(flow: Flow[int]) -> Node[int]:
    return flow.wait_for_event("sweep.go", int)


waiting_app = App([doubled, waits])


async def _everything(engine: AsyncEngine) -> dict[str, int]:
    """Rows of every table a start, signal or deploy writes."""
    async with engine.connect() as conn:
        return {
            table.table.name: int(
                (await conn.execute(select(func.count()).select_from(table.table))).scalar_one()
            )
            for table in (Runs, Tasks, RunEvents, Signals, WorkflowDefinitions)
        }


ClientCall = Callable[[Client, uuid.UUID], Awaitable[object]]
JUNK_CLIENT_CALLS: dict[str, tuple[type[LegatoError], str, ClientCall]] = {
    "start connection junk": (
        InvalidArgument,
        "connection=5 must be an open AsyncConnection",
        lambda c, _: c.start(doubled, 1, connection=5),  # type: ignore[call-overload]
    ),
    "start_many connection junk": (
        InvalidArgument,
        "connection='conn' must be an open AsyncConnection",
        lambda c, _: c.start_many(doubled, [1], connection="conn"),  # type: ignore[arg-type]
    ),
    "start non-workflow": (
        InvalidArgument,
        "start() takes a Workflow object or a workflow name, not 5",
        lambda c, _: c.start(5, 1),  # type: ignore[call-overload]
    ),
    "start_many not a list": (
        InvalidArgument,
        "start_many() takes a sequence of inputs, not int",
        lambda c, _: c.start_many(doubled, 5),  # type: ignore[arg-type]
    ),
    "signal empty name": (
        InvalidArgument,
        "signal name '' must not be empty",
        lambda c, run: c.signal(run, "", 1),
    ),
    "signal oversized name": (
        InvalidArgument,
        "over the 200-character limit",
        lambda c, run: c.signal(run, "x" * 201, 1),
    ),
    "signal non-JSON payload": (
        InvalidInput,
        "invalid payload for event 'sweep.go'",
        lambda c, run: c.signal(run, "sweep.go", object()),
    ),
    "emit non-JSON while none waits": (
        InvalidInput,
        "payload of event 'sweep.nobody' is not storable JSON: $ is a object",
        lambda c, _: c.emit("sweep.nobody", object()),
    ),
    "emit NaN": (
        InvalidInput,
        "payload of event 'sweep.nobody' is not storable JSON: $ is nan",
        lambda c, _: c.emit("sweep.nobody", float("nan")),
    ),
    "cancel not an id": (InvalidRunId, "run id 5 is not a UUID", lambda c, _: c.cancel(5)),  # type: ignore[arg-type]
    "result timeout inf": (
        InvalidArgument,
        "timeout inf must be a finite number of seconds >= 0",
        lambda c, run: c.result(run, timeout=float("inf")),
    ),
    "result timeout nan": (
        InvalidArgument,
        "timeout nan must be a finite number",
        lambda c, run: c.result(run, timeout=float("nan")),
    ),
    "result timeout negative": (
        InvalidArgument,
        "timeout -1 must be a finite number",
        lambda c, run: c.result(run, timeout=-1),
    ),
    "history after_seq past bigint": (
        InvalidArgument,
        "after_seq=9223372036854775808 must be an int >= 0, at most 9223372036854775807",
        lambda c, run: c.history(run, 2**63),
    ),
    "list_runs status junk": (
        InvalidArgument,
        "status='junk' is not a run status",
        lambda c, _: c.list_runs(status="junk"),  # type: ignore[arg-type]
    ),
    "list_runs before junk": (
        InvalidRunId,
        "run id 'x' is not a UUID",
        lambda c, _: c.list_runs(before="x"),
    ),
    "list_runs version past int": (
        InvalidArgument,
        "version=100000000000000000000 must be an int >= 1, at most 2147483647",
        lambda c, _: c.list_runs(version=10**20),
    ),
    "count_runs version past int": (
        InvalidArgument,
        "version=2147483648 must be an int >= 1, at most 2147483647",
        lambda c, _: c.count_runs(RunFilter(version=2**31)),
    ),
    "history of an unknown run": (
        RunNotFound,
        "no run 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f",
        lambda c, _: c.history("01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f"),
    ),
    # None is not "every run": a bulk action on every run is asked for with RunFilter().
    "bulk_cancel None": (
        InvalidArgument,
        "bulk_cancel(where=None): pass a legato.RunFilter",
        lambda c, _: c.bulk_cancel(None),  # type: ignore[arg-type]
    ),
    "bulk_resume None": (
        InvalidArgument,
        "bulk_resume(where=None)",
        lambda c, _: c.bulk_resume(None),  # type: ignore[arg-type]
    ),
    "bulk_rerun None": (
        InvalidArgument,
        "bulk_rerun(where=None)",
        lambda c, _: c.bulk_rerun(None),  # type: ignore[arg-type]
    ),
    "stream after a bool": (
        InvalidArgument,
        "after=True must be an int >= 0",  # named as stream's parameter, not follow's
        lambda c, run: c.stream(run, after=True).__anext__(),
    ),
    "stream after past bigint": (
        InvalidArgument,
        "after=9223372036854775808 must be an int >= 0",
        lambda c, run: c.stream(run, after=2**63).__anext__(),
    ),
    "stream of no run id": (
        InvalidRunId,
        "run id None is not a UUID",
        lambda c, _: c.stream(None).__anext__(),  # type: ignore[arg-type]
    ),
    "stream of an unknown run": (
        RunNotFound,
        "no run 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f",
        lambda c, _: c.stream("01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f").__anext__(),
    ),
    "rerun from_node not a str": (
        InvalidArgument,
        "from_node 5 must be a string, not int",
        lambda c, run: c.rerun(run, from_node=5),  # type: ignore[arg-type]
    ),
    "rerun from_node padded": (
        InvalidArgument,
        "from_node ' price' must not start or end with a space",
        lambda c, run: c.rerun(run, from_node=" price"),
    ),
    "rerun version in capitals": (
        InvalidArgument,
        "version='DEPLOYED' must be 'deployed'",
        lambda c, run: c.rerun(run, version="DEPLOYED"),
    ),
    "bulk_rerun version None": (
        InvalidArgument,
        "version=None must be 'deployed'",
        lambda c, _: c.bulk_rerun(RunFilter(), version=None),  # type: ignore[arg-type]
    ),
    "count_runs naive time": (
        InvalidArgument,
        "created_after=datetime.datetime(2026, 1, 1, 0, 0) must be a timezone-aware datetime",
        lambda c, _: c.count_runs(RunFilter(created_after=datetime(2026, 1, 1))),
    ),
    "bulk_cancel status as text": (
        InvalidArgument,
        "status='failed' is not a run status (RUNNING,",
        lambda c, _: c.bulk_cancel(RunFilter(status="failed")),  # type: ignore[arg-type]
    ),
    "bulk_cancel node with NUL": (
        InvalidArgument,
        "node 'a\\x00' contains the unprintable character U+0000",
        lambda c, _: c.bulk_cancel(RunFilter(node="a\x00")),
    ),
    "start debounce not a Debounce": (
        InvalidArgument,
        "debounce='x' must be a legato.Debounce, or None",
        lambda c, _: c.start(waits, 1, debounce="x"),  # type: ignore[call-overload]
    ),
    "bulk_cancel progress junk": (
        InvalidArgument,
        "progress='x' must be a callable taking a legato.BulkResult",
        lambda c, _: c.bulk_cancel(RunFilter(), progress="x"),  # type: ignore[arg-type]
    ),
}


@pytest.mark.parametrize(
    ("error", "message", "call"), JUNK_CLIENT_CALLS.values(), ids=list(JUNK_CLIENT_CALLS)
)
async def test_junk_to_the_client_is_a_typed_error_and_writes_nothing(
    engine: AsyncEngine, error: type[LegatoError], message: str, call: ClientCall
) -> None:
    async with Client(engine, app=waiting_app) as client:
        run = (await client.start(waits, 1)).run_id
        before = await _everything(engine)
        with pytest.raises(error) as raised:
            await call(client, run)
        assert message in str(raised.value), str(raised.value)
        assert await _everything(engine) == before


async def test_following_with_a_seq_past_bigint_is_invalid_argument(engine: AsyncEngine) -> None:
    async with Client(engine, app=waiting_app) as client:
        run = (await client.start(waits, 1)).run_id
        with pytest.raises(InvalidArgument, match="after_seq=9223372036854775808"):
            async for _ in client.follow(run, after_seq=2**63):
                pass


async def test_start_many_of_no_inputs_starts_nothing(engine: AsyncEngine) -> None:
    before = await _everything(engine)
    async with Client(engine, app=waiting_app) as client:
        assert await client.start_many(doubled, []) == []
    assert await _everything(engine) == before
