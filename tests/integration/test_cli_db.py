"""``legato db ...`` and ``legato partitions ...`` as a user runs them: a subprocess."""

from __future__ import annotations

import asyncio
import os

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from legato.cli import main
from legato.db.server_check import HEAD_REVISION
from legato.db.urls import resolve_url
from tests.helpers import Outcome, run_legato


def assert_one_line_error(outcome: Outcome, *fragments: str) -> None:
    assert outcome.status != 0, outcome
    assert "Traceback" not in outcome.stderr, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("legato: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


async def _schemas(url: str) -> set[str]:
    engine = create_async_engine(resolve_url(url))
    try:
        async with engine.connect() as conn:
            result = await conn.exec_driver_sql(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
                "AND nspname NOT IN ('information_schema', 'public')"
            )
            return {str(name) for name in result.scalars()}
    finally:
        await engine.dispose()


async def test_upgrade_then_current_and_check(empty_database_url: str) -> None:
    url = empty_database_url
    before = await run_legato("db", "check", database_url=url)
    assert before.status == 1
    assert "run `legato db upgrade`" in before.stdout

    upgraded = await run_legato("db", "upgrade", database_url=url)
    assert upgraded.status == 0, upgraded.stderr
    assert f"schema 'legato' is at {HEAD_REVISION}" in upgraded.stdout

    current, check = await asyncio.gather(
        run_legato("db", "current", database_url=url), run_legato("db", "check", database_url=url)
    )
    assert current.stdout.strip() == f"{HEAD_REVISION} (head)"
    assert check.status == 0


async def test_unreachable_server_is_one_line() -> None:
    outcome = await run_legato("db", "upgrade", database_url="postgresql://x@127.0.0.1:1/db")
    assert outcome.status == 1
    assert_one_line_error(outcome, "cannot reach the database")


async def test_invalid_schema_names_change_nothing(empty_database_url: str) -> None:
    url = empty_database_url
    outcomes = await asyncio.gather(
        run_legato("db", "upgrade", "--schema", "x;drop", database_url=url),
        run_legato("db", "upgrade", "--schema", 'x"y', database_url=url),
    )
    for outcome in outcomes:
        assert_one_line_error(outcome, "invalid schema name")
    assert await _schemas(url) == set()


# In-process: the same entry point (``legato.cli.main``) without a second of start-up each.


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    try:
        status = main(list(args))
    except SystemExit as exit_:  # argparse usage errors
        status = int(exit_.code or 0)
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err)


@pytest.fixture
def no_legato_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("LEGATO_")]:
        monkeypatch.delenv(key)


@pytest.mark.usefixtures("no_legato_env")
def test_partitions_ensure_drop_then_downgrade(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--database-url", database_url)
    ensure = run_main(capsys, "partitions", "ensure", *url)
    assert ensure.status == 0, ensure.stderr
    assert ensure.stdout.startswith("no partitions needed: this month and 3 ahead")
    drop = run_main(capsys, "partitions", "drop", "--older-than", "2001-01-01", "--dry-run", *url)
    assert drop.status == 0, drop.stderr
    assert drop.stdout.startswith("no partitions ended before 2001-01-01")
    check = run_main(capsys, "db", "check", *url)
    assert check.status == 0
    assert check.stdout.startswith("schema 'legato' is at head")
    ensure = run_main(capsys, "partitions", "ensure", "--ahead", "4", *url)
    assert ensure.status == 0, ensure.stderr
    created = ensure.stdout.splitlines()
    assert len(created) == 5  # the month of runs, tasks, signals, run_events, run_progress
    assert all(line.startswith("created ") for line in created)
    downgraded = run_main(capsys, "db", "downgrade", *url)
    assert downgraded.status == 0, downgraded.stderr
    assert "is at base" in downgraded.stdout
    assert run_main(capsys, "db", "check", *url).status == 1


@pytest.mark.usefixtures("no_legato_env")
def test_missing_database_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_main(capsys, "db", "current")
    assert_one_line_error(outcome, "--database-url", "LEGATO_DATABASE_URL")


@pytest.mark.usefixtures("no_legato_env")
def test_more_invalid_schema_names(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for schema in ("it's", "1abc", "a" * 64, "x y"):
        outcome = run_main(
            capsys, "partitions", "ensure", "--schema", schema, "--database-url", database_url
        )
        assert_one_line_error(outcome, "invalid schema name")


@pytest.mark.usefixtures("no_legato_env")
def test_bad_arguments_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    url = ("--database-url", "postgresql://x@127.0.0.1:1/db")
    bad_date = run_main(capsys, "partitions", "drop", "--older-than", "last week", *url)
    bad_ahead = run_main(capsys, "partitions", "ensure", "--ahead", "-1", *url)
    for outcome in (bad_date, bad_ahead):
        assert outcome.status == 2
        assert "Traceback" not in outcome.stderr
    assert "not a date" in bad_date.stderr
    assert "not a number of months" in bad_ahead.stderr


async def test_upgrade_fixes_the_shard_count_and_refuses_another(empty_database_url: str) -> None:
    url = empty_database_url
    upgraded = await run_legato("db", "upgrade", "--shards", "8", database_url=url)
    assert upgraded.status == 0, upgraded.stderr
    assert f"schema 'legato' is at {HEAD_REVISION}, with 8 shard keys" in upgraded.stdout
    again = await run_legato("db", "upgrade", "--shards", "8", database_url=url)
    assert again.status == 0, again.stderr
    other = await run_legato("db", "upgrade", "--shards", "4", database_url=url)
    assert_one_line_error(other, "created with 8 shard keys, not 4")
    # Omitted, the recorded count stands.
    plain = await run_legato("db", "upgrade", database_url=url)
    assert "with 8 shard keys" in plain.stdout


@pytest.mark.usefixtures("no_legato_env")
async def test_a_bad_shard_count_variable_writes_nothing(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was read when migration 0011 ran: after 0001 to 0010 had created the schema."""
    for bad in ("-1", "0", "abc", "300"):
        monkeypatch.setenv("LEGATO_SHARD_COUNT", bad)
        outcome = await run_legato("db", "upgrade", database_url=empty_database_url)
        assert_one_line_error(outcome, f"LEGATO_SHARD_COUNT={bad!r}", "fix it or unset it")
    assert await _schemas(empty_database_url) == set()


def test_a_shard_count_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "257", "x"):
        outcome = run_main(capsys, "db", "upgrade", "--shards", bad)
        assert outcome.status == 2, outcome
        assert "a number of shard keys (1 to 256)" in outcome.stderr


async def test_a_plain_server_stays_single_node_and_refuses_distributed(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    refused = await run_legato("db", "upgrade", "--distributed", database_url=url)
    assert_one_line_error(refused, "no Citus extension", "without --distributed")
    assert await _schemas(url) == set()  # refused before anything was migrated
    upgraded = await run_legato("db", "upgrade", database_url=url)
    assert upgraded.status == 0, upgraded.stderr
    assert "schema 'legato' is on one PostgreSQL (no Citus coordinator here)" in upgraded.stdout
    both = await run_legato("db", "upgrade", "--distributed", "--single-node", database_url=url)
    assert both.status == 2, both
