"""Guards that refuse before anything is written: an old server, a schema newer than the
package, a schema name too long for its NOTIFY channels."""

from __future__ import annotations

import asyncio
import os

import pytest
from sqlalchemy import Connection, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import migrations
from legato.db import create_engine, server_check
from legato.db.schema_names import MAX_SCHEMA_NAME_LENGTH
from legato.db.server_check import HEAD_REVISION, check_database
from legato.engine.repositories import notify
from legato.errors import ConfigurationError, IncompatibleDatabase
from legato.schema import SchemaVersion
from tests.helpers import run_legato
from tests.integration.test_cli_db import _schemas, assert_one_line_error, run_main


@pytest.fixture
def no_legato_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("LEGATO_")]:
        monkeypatch.delenv(key)


@pytest.fixture
def server_reports_13(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real server answers every query, but its version reads as 13.11."""

    def pg13(_conn: Connection) -> int:
        return 130011

    monkeypatch.setattr(server_check, "read_server_version_num", pg13)


@pytest.mark.usefixtures("server_reports_13")
async def test_upgrade_of_a_server_too_old_writes_nothing(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        with pytest.raises(IncompatibleDatabase, match=r"PostgreSQL 13 .* is too old"):
            await migrations.upgrade(engine, "legato")
        async with engine.connect() as conn:
            with pytest.raises(IncompatibleDatabase, match="PostgreSQL 13"):
                await check_database(conn, "legato")
    finally:
        await engine.dispose()
    assert await _schemas(empty_database_url) == set()


@pytest.mark.usefixtures("server_reports_13", "no_legato_env")
def test_cli_upgrade_and_dev_on_a_server_too_old_write_nothing(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--database-url", empty_database_url)
    upgrade = run_main(capsys, "db", "upgrade", *url)
    assert_one_line_error(upgrade, "PostgreSQL 13", "too old", "nothing was changed")
    dev = run_main(capsys, "dev", "--app", "examples.signup:app", *url)
    assert_one_line_error(dev, "PostgreSQL 13", "too old")
    assert asyncio.run(_schemas(empty_database_url)) == set()


async def test_a_schema_newer_than_the_package_says_upgrade_the_package(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(SchemaVersion.table).values(version_num="0099"))
    async with engine.connect() as conn:
        with pytest.raises(IncompatibleDatabase) as caught:
            await check_database(conn, "legato")
    message = str(caught.value)
    assert "at migration 0099, newer than this Legato package" in message
    assert f"up to {HEAD_REVISION}" in message
    assert "upgrade the legato package" in message
    check = await run_legato("db", "check", database_url=database_url)
    assert check.status == 1
    assert "newer than this Legato package" in check.stdout
    assert "legato db upgrade" not in check.stdout


async def test_the_longest_schema_name_migrates_and_its_channels_work(
    empty_database_url: str,
) -> None:
    schema = "s" * MAX_SCHEMA_NAME_LENGTH
    engine = create_engine(empty_database_url, schema)
    try:
        await migrations.upgrade(engine, schema)
        async with engine.connect() as conn:
            await check_database(conn, schema)
            await conn.commit()  # an idle session: notifications reach it only between transactions
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            heard: asyncio.Queue[str] = asyncio.Queue()
            channels = [
                notify.decide_channel(schema),
                notify.tasks_channel(schema),
                notify.cancel_channel(schema),
                notify.events_channel(schema),
            ]
            for channel in channels:
                await driver.add_listener(channel, lambda _c, _p, ch, _m: heard.put_nowait(ch))
            async with engine.begin() as other:
                for channel in channels:
                    await other.execute(select(func.pg_notify(channel, "")))
            got = {await asyncio.wait_for(heard.get(), 10) for _ in channels}
        assert got == set(channels)
    finally:
        await engine.dispose()


@pytest.mark.usefixtures("no_legato_env")
def test_a_schema_name_one_too_long_is_refused_before_anything_is_written(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = "s" * (MAX_SCHEMA_NAME_LENGTH + 1)
    outcome = run_main(
        capsys, "db", "upgrade", "--schema", schema, "--database-url", empty_database_url
    )
    assert_one_line_error(outcome, repr(schema), f"at most {MAX_SCHEMA_NAME_LENGTH}")
    with pytest.raises(ConfigurationError, match=f"at most {MAX_SCHEMA_NAME_LENGTH}"):
        create_engine(empty_database_url, schema)
    assert asyncio.run(_schemas(empty_database_url)) == set()
