"""The real-PostgreSQL test harness: the fixtures of ``legato.testing.plugin``.

The server is, in order of preference: ``LEGATO_TEST_DATABASE_URL``; a
testcontainers ``postgres:18`` when a Docker engine answers; a local server
from ``LEGATO_TEST_PG_BIN`` (how ``make test`` runs the suite on PostgreSQL 15);
otherwise an embedded PostgreSQL 18 started once per session. A template
database is migrated once; each test gets a fresh clone of it. The project's
tests use the same plugin its users do, under the names below.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.testing.database import admin
from legato.testing.database import database_url as _database_url

pytest_plugins = ["legato.testing.plugin"]


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Undo what an in-process ``legato`` command's ``configure_logging`` did to the root
    logger: its handler writes to the test's captured stderr, which is closed after the
    test, and a later test's loops would log into it ("I/O operation on closed file")."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    alembic_level = logging.getLogger("alembic").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("alembic").setLevel(alembic_level)


@pytest.fixture(scope="session")
def pg_server_url(legato_server_url: str) -> str:
    """A plain ``postgresql://`` URL of the session's server (database ``postgres``)."""
    return legato_server_url


@pytest.fixture(scope="session")
def template_database(legato_template_database: str) -> str:
    """The name of the session's migrated template database (tests clone it)."""
    return legato_template_database


@pytest.fixture
def database_url(legato_database_url: str) -> str:
    """A fresh, migrated database for one test (a clone of the template)."""
    return legato_database_url


@pytest_asyncio.fixture
async def empty_database_url(pg_server_url: str) -> AsyncIterator[str]:
    """A fresh database with nothing in it, for migration tests."""
    name = f"legato_empty_{uuid.uuid4().hex[:12]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    yield _database_url(pg_server_url, name)
    await admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def engine(legato_engine: AsyncEngine) -> AsyncEngine:
    """An engine on a fresh migrated database, targeting schema ``legato``."""
    return legato_engine
