"""The real-PostgreSQL test harness.

The server is, in order of preference: ``LEGATO_TEST_DATABASE_URL``; a
testcontainers ``postgres:18`` when a Docker engine answers; a local server
from ``LEGATO_TEST_PG_BIN`` (how ``make test`` runs the suite on PostgreSQL 15);
otherwise an embedded PostgreSQL 18 started once per session. A template
database is migrated once; each test gets a fresh clone of it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from legato import migrations
from legato.db import create_engine, resolve_url
from legato.embedded import LocalPostgres

SCHEMA = "legato"


def _docker_available() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A plain ``postgresql://`` URL of the session's server (database ``postgres``)."""
    given = os.environ.get("LEGATO_TEST_DATABASE_URL")
    if given:
        yield given
        return
    bin_dir = os.environ.get("LEGATO_TEST_PG_BIN")
    if not bin_dir and _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:18", driver=None) as container:
            yield container.get_connection_url()
        return
    # glibc overwrites freed memory in the server's processes, so a use-after-free (the
    # PostgreSQL 18 bug tests/integration/test_epq_rechecks.py guards against) crashes
    # the backend at once instead of reading stale bytes that happen to be intact.
    os.environ["MALLOC_PERTURB_"] = "165"
    try:
        server = LocalPostgres(
            bin_dir=Path(bin_dir) if bin_dir else None,
            settings={"fsync": "off", "max_connections": "300", "shared_buffers": "256MB"},
        ).start()
    finally:
        del os.environ["MALLOC_PERTURB_"]
    try:
        yield server.url()
    finally:
        _SERVER_CRASHES.extend(server.crash_reports())
        server.stop()


_SERVER_CRASHES: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say so when the session's server had a backend crash: its log goes with it."""
    if _SERVER_CRASHES:
        terminalreporter.section("PostgreSQL server crash reports (from its log)")
        for line in _SERVER_CRASHES:
            terminalreporter.write_line(line)


def _database_url(server_url: str, database: str) -> str:
    return resolve_url(server_url).set(database=database).render_as_string(hide_password=False)


async def _admin(server_url: str, statement: str) -> None:
    engine = create_async_engine(resolve_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


@pytest_asyncio.fixture(scope="session")
async def template_database(pg_server_url: str) -> AsyncIterator[str]:
    """A database migrated to head once per session; tests clone it."""
    name = f"legato_template_{uuid.uuid4().hex[:8]}"
    await _admin(pg_server_url, f'CREATE DATABASE "{name}"')
    engine = create_engine(_database_url(pg_server_url, name), SCHEMA)
    try:
        await migrations.upgrade(engine, SCHEMA)
    finally:
        await engine.dispose()
    yield name
    await _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def database_url(pg_server_url: str, template_database: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test (a clone of the template)."""
    name = f"legato_test_{uuid.uuid4().hex[:12]}"
    await _admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    yield _database_url(pg_server_url, name)
    await _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def empty_database_url(pg_server_url: str) -> AsyncIterator[str]:
    """A fresh database with nothing in it, for migration tests."""
    name = f"legato_empty_{uuid.uuid4().hex[:12]}"
    await _admin(pg_server_url, f'CREATE DATABASE "{name}"')
    yield _database_url(pg_server_url, name)
    await _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a fresh migrated database, targeting schema ``legato``."""
    eng = create_engine(database_url, SCHEMA)
    yield eng
    await eng.dispose()
