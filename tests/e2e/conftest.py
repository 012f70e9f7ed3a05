from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from tests.e2e.flows import app


@pytest_asyncio.fixture
async def runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    """Every loop in this process, polling fast, against a fresh database."""
    rt = Runtime(engine, app, poll_interval=0.2, grace_period=2.0)
    await rt.start()
    yield rt
    await rt.stop()


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=app) as c:
        yield c
