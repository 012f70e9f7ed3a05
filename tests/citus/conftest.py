"""Fixtures of the Citus tests: a cluster for the session, a distributed schema per test.

The cluster comes from ``tests/citus/cluster.py`` (``LEGATO_CITUS_URL``,
``LEGATO_CITUS_PREFIX`` or ``LEGATO_CITUS_TARBALL``); without one every test here is
skipped with the reason. Each test's schema is migrated and distributed with
``CITUS_TEST_KEYS`` shard keys (9 Citus shards per table instead of the 140 of the
default 16 keys, so a schema is made in seconds).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import migrations
from legato.db import create_engine
from legato.distributed import distribute
from tests.citus.cluster import (
    CitusUnavailable,
    Cluster,
    citus_bin_dir,
    existing_cluster,
    form,
    running_cluster,
)

CITUS_TEST_KEYS = 4


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[Cluster]:
    """The session's Citus cluster (started here unless ``LEGATO_CITUS_URL`` names one)."""
    given = existing_cluster()
    if given is not None:
        yield given
        return
    try:
        bin_dir = citus_bin_dir()
    except CitusUnavailable as reason:
        pytest.skip(str(reason))
    with running_cluster(bin_dir) as cluster:
        asyncio.run(form(cluster.coordinator, cluster.workers))
        yield cluster


async def install_distributed(url: str, schema: str, keys: int = CITUS_TEST_KEYS) -> None:
    """Migrate ``schema`` on the coordinator at ``url`` and distribute it."""
    engine = create_engine(url, schema, pool_size=1, max_overflow=0)
    try:
        await migrations.upgrade(engine, schema, shard_count=keys)
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await distribute(autocommit, schema, keys)
    finally:
        await engine.dispose()


async def drop_schema(url: str, schema: str) -> None:
    engine = create_engine(url, schema, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await engine.dispose()


@pytest_asyncio.fixture
async def citus_schema(
    citus_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """A fresh schema on the cluster, migrated and distributed (dropped afterwards); the
    test's ``LEGATO_SCHEMA``, so the commands and processes a test starts use it too."""
    schema = f"legato_{uuid.uuid4().hex[:10]}"
    await install_distributed(citus_cluster.url, schema)
    monkeypatch.setenv("LEGATO_SCHEMA", schema)
    yield schema
    await drop_schema(citus_cluster.url, schema)


@pytest_asyncio.fixture
async def citus_engine(citus_cluster: Cluster, citus_schema: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the coordinator targeting the test's distributed schema."""
    engine = create_engine(citus_cluster.url, citus_schema)
    yield engine
    await engine.dispose()


@pytest.fixture
def engine(citus_engine: AsyncEngine) -> AsyncEngine:
    """The engine the shared end-to-end tests (re-collected here) run on: the cluster's."""
    return citus_engine


@pytest.fixture
def database_url(citus_cluster: Cluster, citus_schema: str) -> str:
    """The URL the shared tests (re-collected here) pass to commands and processes: the
    coordinator's database (the schema goes by ``LEGATO_SCHEMA``)."""
    return citus_cluster.url
