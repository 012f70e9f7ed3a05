"""tests/e2e/test_transactional_tasks.py on the Citus cluster: a transactional task's
writes (to a table of the user's on the coordinator) and its result commit together,
two-phase with the key's node."""

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.engine.repositories import transactions
from tests.e2e import txflows
from tests.e2e.test_transactional_tasks import *  # noqa: F403


# Two of the shared module's names are replaced here (hence the redefinitions).
@pytest_asyncio.fixture  # type: ignore[no-redef]
async def tx_client(engine: AsyncEngine) -> AsyncIterator[Client]:
    """The ledger in the cluster's one database, made once for the session's tests."""
    async with engine.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{txflows.USER_SCHEMA}"'))
        await conn.run_sync(txflows.metadata.create_all)
    async with Client(engine, app=txflows.app) as client:
        yield client


async def test_the_transaction_is_bounded_by_start_to_close(  # type: ignore[no-redef]
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await transactions.bound(conn, timedelta(milliseconds=1500))
        settings = [
            (await conn.execute(text(f"SHOW {name}"))).scalar_one()
            for name in ("statement_timeout", "plan_cache_mode")
        ]
    assert settings == ["1500ms", "auto"]
    async with engine.connect() as conn:  # SET LOCAL: gone with the transaction
        assert (await conn.execute(text("SHOW statement_timeout"))).scalar_one() == "0"
    # The sessions' own plan_cache_mode on a distributed install: test_distributed_install.
