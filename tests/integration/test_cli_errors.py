"""Every command, every bad argument: one ``legato: error:`` line, a non-zero status, no
traceback, and nothing written to the database.

Most cases run through ``legato.cli.main`` in this process (each would otherwise pay a
second of start-up); a handful run ``python -m legato`` to prove that nothing escapes
the real process either.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from examples.signup import app as signup_app
from legato import Client
from legato.cli import main
from legato.db import create_engine
from legato.db.urls import resolve_url
from legato.schema import (
    DecideQueue,
    IdempotencyKeys,
    RunEvents,
    Runs,
    Signals,
    TaskQueue,
    Tasks,
    Timers,
    WorkflowDefinitions,
)
from legato.schema.types import uuid7

ROOT = Path(__file__).resolve().parents[2]
TABLES = (
    Runs,
    Tasks,
    Signals,
    RunEvents,
    DecideQueue,
    TaskQueue,
    Timers,
    IdempotencyKeys,
    WorkflowDefinitions,
)
DEEP = "[" * 100_000 + "]" * 100_000
EMAIL = '{"email": "ada@example.com"}'


@dataclass(frozen=True)
class Done:
    rc: int
    out: str
    err: str


def _help(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*command, "--help"]) == 0
    return out.getvalue()


def _leaf_commands(*command: str) -> list[tuple[str, ...]]:
    """Every runnable command, read from ``legato --help`` and its groups' ``--help``."""
    text = _help(*command)
    if "  COMMAND\n" not in text:
        return [command]
    listing = text.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"^    (\S+)", listing, flags=re.MULTILINE)
    return [leaf for name in names for leaf in _leaf_commands(*command, name)]


LEAVES = _leaf_commands()
RUN = "01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f"
# The least each command needs to get past its parser: a bad URL is then the only fault.
VALID_ARGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("db", "upgrade"): (),
    ("db", "downgrade"): (),
    ("db", "current"): (),
    ("db", "check"): (),
    ("partitions", "ensure"): (),
    ("partitions", "drop"): ("--older-than", "2001-01-01", "--dry-run"),
    ("decider",): ("--app", "examples.signup:app"),
    ("worker",): ("--app", "examples.signup:app"),
    ("timer",): (),
    ("dev",): ("--app", "examples.signup:app"),
    ("deploy",): ("--app", "examples.signup:app"),
    ("runs", "list"): (),
    ("runs", "show"): (RUN,),
    ("runs", "watch"): (RUN,),
    ("runs", "stream"): (RUN,),
    ("runs", "start"): ("signup", "--input", EMAIL),
    ("runs", "signal"): (RUN, "signup.confirmed"),
    ("runs", "emit"): ("signup.confirmed",),
    ("runs", "cancel"): (RUN,),
    ("runs", "resume"): (RUN,),
    ("runs", "rerun"): (RUN,),
    ("bench",): ("--scenario", "start", "--size", "tiny"),
    ("stats",): (),
    ("schedules", "list"): (),
    ("schedules", "pause"): ("nightly",),
    ("schedules", "resume"): ("nightly",),
    ("schedules", "trigger"): ("nightly",),
    ("ui",): (),
    ("webhooks", "add"): ("https://hooks.example.com/x", "--secret", "s"),
    ("webhooks", "list"): (),
    ("webhooks", "remove"): ("1",),
    ("outbox", "list"): (),
    ("outbox", "show"): ("1",),
    ("outbox", "replay"): ("--all",),
    ("relay",): (),
}


def test_the_command_list_is_complete() -> None:
    assert set(LEAVES) == set(VALID_ARGS), "add the new command to VALID_ARGS"
    assert len(LEAVES) == len(set(LEAVES))


@pytest.mark.parametrize("command", LEAVES, ids=" ".join)
def test_every_command_takes_the_common_options(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "--log-level {DEBUG,INFO,WARNING,ERROR}" in text
    assert "--database-url URL" in text
    if command != ("bench",):  # bench makes its own databases
        assert "--schema SCHEMA" in text


def assert_one_error_line(done: Done, *fragments: str, rc: int | None = None) -> None:
    assert done.rc != 0, done
    if rc is not None:
        assert done.rc == rc, done
    assert "Traceback" not in done.err, done.err
    lines = done.err.splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("legato: error: "), done.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert done.out == "", done.out


async def legato_here(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    capsys.readouterr()
    rc = await asyncio.to_thread(main, list(args))
    captured = capsys.readouterr()
    return Done(rc, captured.out, captured.err)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("LEGATO_")]:
        monkeypatch.delenv(key)


def _wrapped(server_url: str) -> tuple[str, int]:
    """The test server's URL with its port + 65536: over TCP, asyncpg wraps such a port
    round to the real one and connects."""
    url = resolve_url(server_url)
    port = (url.port or 5432) + 65536
    wrapped = url.set(drivername="postgresql", port=port)
    return wrapped.render_as_string(hide_password=False), port


BAD_URLS = {
    "port-abc": ("postgresql://u@localhost:abc/db", "bad port in database URL"),
    "port-empty": ("postgresql://u@localhost:/db", "bad port in database URL"),
    "port-0": ("postgresql://u@localhost:0/db", "bad port 0"),
    "port-70000": ("postgresql://u@localhost:70000/db", "bad port 70000"),
    "port--1": ("postgresql://u@localhost:-1/db", "bad port -1"),
    "query-port": ("postgresql://u@localhost/db?port=x", "bad port 'x'"),
    "scheme": ("mysql://u@localhost/db", "unsupported database URL scheme 'mysql'"),
    "garbage": ("not a url", "not a database URL: 'not a url'"),
    "empty": ("", "argument --database-url: must not be empty"),
    "password-hidden": ("postgresql://u:hunter2@h:abc/db", "u:***@h:abc"),
}


@pytest.mark.usefixtures("env")
@pytest.mark.parametrize("case", BAD_URLS, ids=str)
@pytest.mark.parametrize("command", LEAVES, ids=" ".join)
async def test_bad_database_urls(
    command: tuple[str, ...], case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url, fragment = BAD_URLS[case]
    done = await legato_here(capsys, *command, *VALID_ARGS[command], "--database-url", url)
    assert_one_error_line(done, fragment, rc=2 if case == "empty" else 1)
    assert "hunter2" not in done.err


@pytest.mark.usefixtures("env")
@pytest.mark.parametrize("command", [c for c in LEAVES if c not in {("dev",), ("bench",)}])
async def test_no_database_given(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # dev starts its embedded PostgreSQL and bench its own server when given none.
    done = await legato_here(capsys, *command, *VALID_ARGS[command])
    assert_one_error_line(done, "--database-url", "LEGATO_DATABASE_URL", rc=1)


@dataclass(frozen=True)
class Seeded:
    url: str
    run_id: str
    engine: AsyncEngine


async def _admin(server_url: str, statement: str) -> None:
    admin = create_async_engine(resolve_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await admin.dispose()


@pytest_asyncio.fixture(scope="module")
async def database(pg_server_url: str, template_database: str) -> AsyncIterator[Seeded]:
    """One database for the module (every case checks that it changed nothing): the
    signup workflow deployed and one run waiting."""
    name = f"legato_cli_errors_{uuid.uuid4().hex[:8]}"
    await _admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    url = resolve_url(pg_server_url).set(database=name)
    engine = create_engine(url, "legato")
    try:
        async with Client(engine) as client:
            await client.deploy(signup_app)
            handle = await client.start("signup", {"email": "ada@example.com"})
        plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
        yield Seeded(plain, str(handle.run_id), engine)
    finally:
        await engine.dispose()
        await _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def seeded(database: Seeded, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    """The module's database as ``LEGATO_DATABASE_URL`` (and no other ``LEGATO_`` setting)."""
    for key in [key for key in os.environ if key.startswith("LEGATO_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LEGATO_DATABASE_URL", database.url)
    return database


async def row_counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            table.table.name: (
                await conn.execute(select(func.count()).select_from(table.table))
            ).scalar_one()
            for table in TABLES
        }


UNKNOWN = str(uuid7())
# (arguments, fragments of the error line, exit status); {run} is the seeded run's id.
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    # JSON
    "start deep input": (("runs", "start", "signup", "--input", DEEP), ("100 levels",), 1),
    "start NaN": (("runs", "start", "signup", "--input", "NaN"), ("NaN", "'NaN'"), 1),
    "start Infinity": (
        ("runs", "start", "signup", "--input", '{"a": -Infinity}'),
        ("-Infinity",),
        1,
    ),
    "start 1e999": (("runs", "start", "signup", "--input", "[1e999]"), ("1e999",), 1),
    "start huge int": (("runs", "start", "signup", "--input", "9" * 5000), ("not valid JSON",), 1),
    "start bad JSON": (
        ("runs", "start", "signup", "--input", "{bad"),
        ("not valid JSON", "'{bad'"),
        1,
    ),
    "start empty JSON": (("runs", "start", "signup", "--input", ""), ("not valid JSON", "''"), 1),
    "start long bad JSON": (
        ("runs", "start", "signup", "--input", "x" * 100_000),
        ("not valid JSON", "[100,000 characters]"),
        1,
    ),
    "signal deep payload": (
        ("runs", "signal", "{run}", "signup.confirmed", "--payload", DEEP),
        ("100 levels",),
        1,
    ),
    "signal NaN": (
        ("runs", "signal", "{run}", "signup.confirmed", "--payload", "[NaN]"),
        ("NaN",),
        1,
    ),
    "signal bad JSON": (
        ("runs", "signal", "{run}", "signup.confirmed", "--payload", "{bad"),
        ("'{bad'",),
        1,
    ),
    "emit deep payload": (
        ("runs", "emit", "signup.confirmed", "--payload", DEEP),
        ("100 levels",),
        1,
    ),
    "emit Infinity": (
        ("runs", "emit", "signup.confirmed", "--payload", "Infinity"),
        ("Infinity",),
        1,
    ),
    "start lone surrogate": (
        ("runs", "start", "signup", "--input", '["\\ud800"]'),
        ("surrogate", "'[\"\\\\ud800\"]'"),
        1,
    ),
    "start invalid for its model": (
        ("runs", "start", "signup", "--app", "examples.signup:app", "--input", "{}"),
        ("email", "Field required"),
        1,
    ),
    # run ids
    "show bad id": (("runs", "show", "nope"), ("not a run id: 'nope'",), 1),
    "show empty id": (("runs", "show", ""), ("not a run id: ''",), 1),
    "show huge id": (("runs", "show", "x" * 100_000), ("not a run id", "[100,000 characters]"), 1),
    "show unknown id": (("runs", "show", UNKNOWN), (UNKNOWN,), 1),
    "watch bad id": (("runs", "watch", "nope"), ("'nope'",), 1),
    "signal bad id": (("runs", "signal", "nope", "signup.confirmed"), ("'nope'",), 1),
    "signal unknown id": (("runs", "signal", UNKNOWN, "signup.confirmed"), (UNKNOWN,), 1),
    "cancel bad id": (("runs", "cancel", "nope"), ("'nope'",), 1),
    "cancel unknown id": (("runs", "cancel", UNKNOWN), (UNKNOWN,), 1),
    "list bad --before": (("runs", "list", "--before", "nope"), ("--before", "'nope'"), 2),
    # rerun, and cancel/rerun/resume by filter
    "rerun bad id": (("runs", "rerun", "nope"), ("not a run id: 'nope'",), 1),
    "rerun unknown id": (("runs", "rerun", UNKNOWN), ("no run", UNKNOWN), 1),
    "rerun a running run": (
        ("runs", "rerun", "{run}"),
        ("is still running", "cancel it (legato runs cancel"),
        1,
    ),
    "rerun neither id nor filter": (("runs", "rerun"), ("give a RUN_ID, or filters",), 1),
    "rerun id and filter": (
        ("runs", "rerun", "{run}", "--workflow", "signup"),
        ("a run id or filters, not both",),
        1,
    ),
    "rerun unknown version": (
        ("runs", "rerun", "{run}", "--version", "latest"),
        ("--version", "'latest'"),
        2,
    ),
    "rerun empty --from": (("runs", "rerun", "{run}", "--from", ""), ("--from",), 2),
    "rerun unknown status": (("runs", "rerun", "--status", "nope"), ("unknown status 'nope'",), 2),
    "cancel bad time": (
        ("runs", "cancel", "--created-after", "yesterday"),
        ("not a time with a zone: 'yesterday'",),
        2,
    ),
    "cancel time without a zone": (
        ("runs", "cancel", "--created-before", "2026-01-01T00:00"),
        ("not a time with a zone",),
        2,
    ),
    "resume reversed time range": (
        (
            "runs",
            "resume",
            "--created-after",
            "2026-02-01T00:00:00+00:00",
            "--created-before",
            "2026-01-01T00:00:00+00:00",
        ),
        ("is not before --created-before",),
        2,
    ),
    "cancel --dry-run of one run": (
        ("runs", "cancel", "{run}", "--dry-run"),
        ("--dry-run is for filters",),
        1,
    ),
    "cancel many unconfirmed": (
        ("runs", "cancel", "--workflow", "signup", "--confirm-above", "0"),
        ("1 runs match, more than --confirm-above 0: pass --yes",),
        1,
    ),
    "cancel --confirm-above -1": (
        ("runs", "cancel", "--workflow", "signup", "--confirm-above", "-1"),
        ("--confirm-above", "'-1'"),
        2,
    ),
    "list --workflow-version 0": (
        ("runs", "list", "--workflow-version", "0"),
        ("--workflow-version", "'0'"),
        2,
    ),
    "list empty --node": (("runs", "list", "--node", ""), ("--node",), 2),
    "list --workflow-version past int": (
        ("runs", "list", "--workflow-version", str(2**31)),
        ("--workflow-version", "'2147483648'"),
        2,
    ),
    "list --limit superscript": (("runs", "list", "--limit", "\u00b2"), ("--limit", "'²'"), 2),
    "webhooks remove superscript": (("webhooks", "remove", "\u00b2"), ("not an id", "'²'"), 2),
    "outbox show huge id": (("outbox", "show", "9" * 30), ("not an id",), 2),
    "cancel --confirm-above huge": (
        ("runs", "cancel", "--workflow", "signup", "--confirm-above", "9" * 30),
        ("--confirm-above",),
        2,
    ),
    "rerun --from with NUL": (("runs", "rerun", "{run}", "--from", "a\x00b"), ("NUL",), 2),
    "rerun --from unprintable in a dry run": (
        ("runs", "rerun", "--workflow", "signup", "--from", "\x01", "--dry-run"),
        ("--from '\\x01' contains the unprintable character U+0001",),
        1,
    ),
    "rerun --from too long by filter": (
        ("runs", "rerun", "--workflow", "signup", "--from", "x" * 10_000, "--yes"),
        ("--from", "over the 200-character limit"),
        1,
    ),
    "cancel --wait with filters": (
        ("runs", "cancel", "--workflow", "signup", "--wait", "--yes"),
        ("--wait is for one RUN_ID",),
        1,
    ),
    "rerun comma-joined statuses": (
        ("runs", "rerun", "--status", "failed,running", "--dry-run"),
        ("unknown status 'failed,running'",),
        2,
    ),
    "cancel impossible date": (
        ("runs", "cancel", "--created-after", "2026-02-30T00:00:00+00:00"),
        ("not a time with a zone: '2026-02-30T00:00:00+00:00'",),
        2,
    ),
    "cancel empty time range": (
        (
            "runs",
            "cancel",
            "--created-after",
            "2026-01-01T00:00:00+00:00",
            "--created-before",
            "2026-01-01T00:00:00+00:00",
        ),
        ("is not before --created-before",),
        2,
    ),
    "cancel --confirm-above fraction": (
        ("runs", "cancel", "--workflow", "signup", "--confirm-above", "1.5"),
        ("--confirm-above", "'1.5'"),
        2,
    ),
    "cancel --node too long": (
        ("runs", "cancel", "--node", "x" * 10_000, "--dry-run"),
        ("node", "over the 200-character limit"),
        1,
    ),
    "resume with a bad id": (("runs", "resume", "nope"), ("not a run id: 'nope'",), 1),
    # runs stream
    "stream bad id": (("runs", "stream", "nope"), ("not a run id: 'nope'",), 1),
    "stream huge id": (("runs", "stream", "x" * 100_000), ("not a run id",), 1),
    "stream unknown id": (("runs", "stream", UNKNOWN), ("no run", UNKNOWN), 1),
    "stream --after -1": (("runs", "stream", "{run}", "--after", "-1"), ("--after", "'-1'"), 2),
    "stream --after past bigint": (
        ("runs", "stream", "{run}", "--after", "9" * 30),
        ("--after", "a whole number >= 0"),
        2,
    ),
    "stream --after fraction": (("runs", "stream", "{run}", "--after", "1.5"), ("'1.5'",), 2),
    "stream --timeout nan": (("runs", "stream", "{run}", "--timeout", "nan"), ("'nan'",), 2),
    "stream --timeout 1e400": (("runs", "stream", "{run}", "--timeout", "1e400"), ("'1e400'",), 2),
    "stream --poll-interval 0": (
        ("runs", "stream", "{run}", "--poll-interval", "0"),
        ("--poll-interval", "'0'"),
        2,
    ),
    "stream of a running run times out": (
        ("runs", "stream", "{run}", "--timeout", "0.2"),
        ("is still running after 0.2s", "longer --timeout"),
        2,
    ),
    # deploy --check
    "deploy --check without --app": (("deploy", "--check"), ("--app",), 2),
    "deploy --json without --check": (
        ("deploy", "--json", "--app", "examples.signup:app"),
        ("--json goes with --check",),
        1,
    ),
    "deploy --check missing module": (
        ("deploy", "--check", "--app", "nosuch:app"),
        ("no module named 'nosuch'",),
        1,
    ),
    "deploy --check not an App": (
        ("deploy", "--check", "--app", "examples.signup:Signup"),
        ("not a legato.App",),
        1,
    ),
    "start --shard-key too long": (
        ("runs", "start", "signup", "--input", EMAIL, "--shard-key", "k" * 300),
        ("shard_key",),
        1,
    ),
    "list long --error-type": (
        ("runs", "list", "--error-type", "x" * 300),
        ("error_type",),
        1,
    ),
    # numbers
    "list --limit 5000": (
        ("runs", "list", "--limit", "5000"),
        ("--limit", "1 to 1000", "'5000'"),
        2,
    ),
    "list --limit 0": (("runs", "list", "--limit", "0"), ("--limit", "'0'"), 2),
    "list --limit -1": (("runs", "list", "--limit", "-1"), ("--limit", "'-1'"), 2),
    "list --limit abc": (("runs", "list", "--limit", "abc"), ("--limit", "'abc'"), 2),
    "list --limit 2.5": (("runs", "list", "--limit", "2.5"), ("--limit", "'2.5'"), 2),
    "decider --deciders 0": (
        ("decider", "--app", "examples.signup:app", "--deciders", "0"),
        ("'0'",),
        2,
    ),
    "decider --deciders 65": (
        ("decider", "--app", "examples.signup:app", "--deciders", "65"),
        ("1 to 64",),
        2,
    ),
    "decider --poll-interval 0": (
        ("decider", "--app", "examples.signup:app", "--poll-interval", "0"),
        ("--poll-interval", "'0'"),
        2,
    ),
    "worker --concurrency 0": (
        ("worker", "--app", "examples.signup:app", "--concurrency", "0"),
        ("'0'",),
        2,
    ),
    "worker --concurrency huge": (
        ("worker", "--app", "examples.signup:app", "--concurrency", "9" * 20),
        ("1 to 10000",),
        2,
    ),
    "worker --grace-period -1": (
        ("worker", "--app", "examples.signup:app", "--grace-period", "-1"),
        ("'-1'",),
        2,
    ),
    "worker --poll-interval nan": (
        ("worker", "--app", "examples.signup:app", "--poll-interval", "nan"),
        ("'nan'",),
        2,
    ),
    "timer --poll-interval inf": (("timer", "--poll-interval", "inf"), ("'inf'",), 2),
    "timer --poll-interval 1e400": (("timer", "--poll-interval", "1e400"), ("'1e400'",), 2),
    "dev --concurrency 0": (
        ("dev", "--app", "examples.signup:app", "--concurrency", "0"),
        ("'0'",),
        2,
    ),
    "watch --timeout nan": (
        ("runs", "watch", "{run}", "--timeout", "nan"),
        ("--timeout", "'nan'"),
        2,
    ),
    "watch --poll-interval -1": (("runs", "watch", "{run}", "--poll-interval", "-1"), ("'-1'",), 2),
    "start --timeout -1": (("runs", "start", "signup", "--wait", "--timeout", "-1"), ("'-1'",), 2),
    "cancel --timeout inf": (
        ("runs", "cancel", "{run}", "--wait", "--timeout", "inf"),
        ("'inf'",),
        2,
    ),
    "ensure --ahead -1": (("partitions", "ensure", "--ahead", "-1"), ("'-1'",), 2),
    "ensure --ahead 100000": (
        ("partitions", "ensure", "--ahead", "100000"),
        ("0 to 60", "'100000'"),
        2,
    ),
    "bench --concurrency 0": (("bench", "--concurrency", "0"), ("--concurrency", "'0'"), 2),
    # --app
    "deploy missing module": (
        ("deploy", "--app", "nosuch.module:app"),
        ("no module named 'nosuch'",),
        1,
    ),
    "deploy missing attribute": (
        ("deploy", "--app", "examples.signup:nothing"),
        ("has no 'nothing'",),
        1,
    ),
    "deploy not an App": (("deploy", "--app", "examples.signup:Signup"), ("not a legato.App",), 1),
    "deploy no colon": (("deploy", "--app", "examples.signup"), ("expected module:attribute",), 1),
    "deploy relative module": (("deploy", "--app", ".signup:app"), ("'.signup'",), 1),
    "deploy empty app": (("deploy", "--app", ""), ("--app", "must not be empty"), 2),
    "deploy no app": (("deploy",), ("--app",), 2),
    "start with a bad app": (("runs", "start", "signup", "--app", "nosuch:app"), ("'nosuch'",), 1),
    "signal with a bad app": (
        ("runs", "signal", "{run}", "x", "--app", "os:path"),
        ("not a legato.App",),
        1,
    ),
    "start unknown workflow for the app": (
        ("runs", "start", "nosuch", "--app", "examples.signup:app"),
        ("no workflow 'nosuch'",),
        1,
    ),
    # names, statuses, dates, revisions, schemas
    "start unknown workflow": (("runs", "start", "nosuch", "--input", "{}"), ("nosuch",), 1),
    "start empty workflow": (("runs", "start", ""), ("WORKFLOW", "must not be empty"), 2),
    "start empty key": (
        ("runs", "start", "signup", "--idempotency-key", ""),
        ("must not be empty",),
        2,
    ),
    "signal empty name": (("runs", "signal", "{run}", ""), ("NAME", "must not be empty"), 2),
    "emit empty name": (("runs", "emit", " "), ("NAME", "must not be empty"), 2),
    "list unknown status": (("runs", "list", "--status", "nope"), ("unknown status 'nope'",), 2),
    "list empty workflow": (("runs", "list", "--workflow", ""), ("--workflow",), 2),
    "worker empty queue": (
        ("worker", "--app", "examples.signup:app", "--queue", ""),
        ("--queue",),
        2,
    ),
    "dev empty data dir": (
        ("dev", "--app", "examples.signup:app", "--data-dir", ""),
        ("--data-dir",),
        2,
    ),
    "drop bad date": (
        ("partitions", "drop", "--older-than", "last week"),
        ("not a date", "'last week'"),
        2,
    ),
    "drop month 13": (("partitions", "drop", "--older-than", "2024-13-01"), ("'2024-13-01'",), 2),
    "drop empty date": (("partitions", "drop", "--older-than", ""), ("not a date", "''"), 2),
    "upgrade unknown revision": (
        ("db", "upgrade", "--revision", "nosuch"),
        ("migration", "nosuch"),
        1,
    ),
    "downgrade unknown revision": (
        ("db", "downgrade", "--revision", "nosuch"),
        ("migration", "nosuch"),
        1,
    ),
    "upgrade empty revision": (("db", "upgrade", "--revision", ""), ("--revision",), 2),
    "upgrade bad schema": (
        ("db", "upgrade", "--schema", "x;drop"),
        ("invalid schema name", "'x;drop'"),
        1,
    ),
    "current empty schema": (
        ("db", "current", "--schema", ""),
        ("--schema", "must not be empty"),
        2,
    ),
    "list bad schema": (("runs", "list", "--schema", 'x"y'), ("invalid schema name",), 1),
    "bench unknown size": (("bench", "--size", "huge"), ("--size", "'huge'"), 2),
    "bench unknown scenario": (("bench", "--scenario", "nope"), ("--scenario", "'nope'"), 2),
    "unknown log level": (("runs", "list", "--log-level", "loud"), ("--log-level", "'LOUD'"), 2),
    # NUL bytes and the parser itself
    "NUL in a name": (("runs", "list", "--workflow", "a\x00b"), ("NUL", "'a\\x00b'"), 2),
    "NUL in a run id": (("runs", "show", "\x00"), ("NUL",), 2),
    "NUL in JSON": (("runs", "start", "signup", "--input", '"\x00"'), ("NUL",), 2),
    "no command": ((), ("COMMAND",), 2),
    "unknown command": (("nosuch",), ("'nosuch'",), 2),
    "group without command": (("runs",), ("COMMAND", "legato runs --help"), 2),
    "unknown option": (("runs", "list", "--frobnicate"), ("--frobnicate",), 2),
    "option of another command": (("timer", "--deciders", "2"), ("--deciders",), 2),
}


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_bad_input_is_one_line_and_writes_nothing(
    case: str, seeded: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    args, fragments, rc = CASES[case]
    before = await row_counts(seeded.engine)
    done = await legato_here(capsys, *(arg.replace("{run}", seeded.run_id) for arg in args))
    assert_one_error_line(done, *fragments, rc=rc)
    assert await row_counts(seeded.engine) == before


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "start", "signup", "--input", EMAIL),
        ("runs", "signal", "{run}", "signup.confirmed", "--payload", '{"code": "c"}'),
        ("deploy", "--app", "examples.signup:app"),
        ("db", "downgrade"),
        ("partitions", "ensure", "--ahead", "6"),
    ],
    ids=" ".join,
)
async def test_a_port_past_65535_does_not_wrap_round_to_the_real_server(
    args: tuple[str, ...],
    seeded: Seeded,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = await row_counts(seeded.engine)
    wrapped, port = _wrapped(seeded.url)
    command = (arg.replace("{run}", seeded.run_id) for arg in args)
    done = await legato_here(capsys, *command, "--database-url", wrapped)
    assert_one_error_line(done, f"bad port {port}", rc=1)
    assert await row_counts(seeded.engine) == before


# -- the real process ---------------------------------------------------------------------


async def legato(*args: str | bytes, cwd: Path = ROOT, stdin: bytes = b"", url: str = "") -> Done:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEGATO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if url:
        env["LEGATO_DATABASE_URL"] = url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "legato",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    """A directory of broken ``--app`` modules."""
    (tmp_path / "boom.py").write_text('raise RuntimeError("boom at import")\n')
    (tmp_path / "quits.py").write_text("import sys\n\nsys.exit(3)\n")
    (tmp_path / "lazy.py").write_text(
        "def __getattr__(name):\n    raise RuntimeError(f'lazy {name} failed')\n"
    )
    return tmp_path


async def test_the_real_process_prints_one_line(seeded: Seeded) -> None:
    before = await row_counts(seeded.engine)
    cases = [
        (legato("db", "current", "--database-url", "postgresql://u@localhost:abc/db"), "bad port"),
        (legato("runs", "list", "--limit", "5000", url=seeded.url), "'5000'"),
        (
            legato("runs", "start", "signup", "--input", "@-", stdin=DEEP.encode(), url=seeded.url),
            "100 levels",
        ),
        (legato("runs", "start", "signup", "--input", "NaN", url=seeded.url), "NaN"),
        (legato("bench", "--concurrency", "0"), "--concurrency"),
        (legato("runs", "list", "--workflow", b"caf\xe9", url=seeded.url), "not valid UTF-8"),
        (
            legato("runs", "start", "signup", "--input", "@-", stdin=b"\xff\xfe", url=seeded.url),
            "UTF-8",
        ),
        (
            legato("runs", "list", "--database-url", "postgresql://u@no-such-host.invalid/db"),
            "cannot reach the database",
        ),
        (legato("db", "upgrade", "--database-url", _wrapped(seeded.url)[0]), "bad port"),
    ]
    done = await asyncio.gather(*(run for run, _ in cases))
    for outcome, (_, fragment) in zip(done, cases, strict=True):
        assert_one_error_line(outcome, fragment)
    assert await row_counts(seeded.engine) == before


@pytest.mark.usefixtures("seeded")
async def test_broken_app_modules(apps: Path, seeded: Seeded) -> None:
    boom = await legato("worker", "--app", "boom:app", cwd=apps, url=seeded.url)
    assert_one_error_line(boom, "importing 'boom' failed: RuntimeError: boom at import", rc=1)
    quits = await legato("deploy", "--app", "quits:app", cwd=apps, url=seeded.url)
    assert_one_error_line(quits, "importing 'quits' failed: SystemExit: 3", rc=1)


async def test_an_unexpected_error_is_one_line_with_a_hint(apps: Path, seeded: Seeded) -> None:
    lazy = await legato("deploy", "--app", "lazy:app", cwd=apps, url=seeded.url)
    assert_one_error_line(
        lazy,
        "RuntimeError: lazy app failed",
        "rerun with --log-level DEBUG for the traceback",
        rc=1,
    )
    debug = await legato(
        "deploy", "--app", "lazy:app", "--log-level", "DEBUG", cwd=apps, url=seeded.url
    )
    assert debug.rc == 1
    assert "Traceback (most recent call last)" in debug.err
    last = debug.err.splitlines()[-1]
    assert last == "legato: error: RuntimeError: lazy app failed", debug.err


async def test_version_and_help() -> None:
    from importlib.metadata import version

    done = await legato("--version")
    assert (done.rc, done.out.strip()) == (0, f"legato {version('legato')}")
    assert _help().startswith("usage: legato")
