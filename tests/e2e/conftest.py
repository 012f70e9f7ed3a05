from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from tests.e2e import flows
from tests.e2e.flows import app


@pytest.fixture(autouse=True)
def _fresh_flow_counters() -> None:
    """The flows record calls in module-level state; every test starts from none."""
    for state in (flows.FLAKY_CALLS, flows.CALLS, flows.HANDLED, flows.SLOW_CALLS):
        state.clear()


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
