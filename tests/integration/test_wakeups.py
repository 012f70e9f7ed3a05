"""LISTEN/NOTIFY wake-ups survive a lost listen connection."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import create_engine
from legato.engine.loops import Wakeups


async def _notify(engine: AsyncEngine, channel: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(select(func.pg_notify(channel, "")))


async def test_a_killed_listen_connection_is_reopened(engine: AsyncEngine) -> None:
    wakeups = Wakeups(engine)
    try:
        event = await wakeups.subscribe("legato_test_channel")
        await _notify(engine, "legato_test_channel")
        await asyncio.wait_for(event.wait(), timeout=5)
        event.clear()

        # The listen connection's backend: its last statement was the LISTEN.
        async with engine.begin() as conn:
            killed = await conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %legato_test_channel%'"
            )
            assert killed.scalars().all() == [True]
        await asyncio.sleep(0.2)
        await wakeups.ensure_listening()

        await _notify(engine, "legato_test_channel")
        await asyncio.wait_for(event.wait(), timeout=5)
    finally:
        await wakeups.close()


async def test_a_closed_listener_leaves_no_listening_connection_in_the_pool(
    database_url: str,
) -> None:
    engine = create_engine(database_url, "legato", pool_size=1, max_overflow=0)
    try:
        wakeups = Wakeups(engine)
        await wakeups.subscribe("legato_test_channel")
        await wakeups.close()

        async with engine.connect() as conn:  # the pool's one connection
            channels = await conn.exec_driver_sql("SELECT pg_listening_channels()")
            assert channels.scalars().all() == []
    finally:
        await engine.dispose()
