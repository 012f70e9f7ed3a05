"""LISTEN/NOTIFY wake-ups survive a lost listen connection."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

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
