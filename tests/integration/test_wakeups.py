"""LISTEN/NOTIFY wake-ups survive a lost listen connection."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import create_engine
from legato.engine.transport.wakeups import Wakeups
from tests.helpers import eventually


async def _notify(engine: AsyncEngine, channel: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(select(func.pg_notify(channel, "")))


async def _listener(engine: AsyncEngine, channel: str) -> int | None:
    """The backend of the listen connection: its last statement was the LISTEN."""
    async with engine.connect() as conn:
        pids = await conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' || :channel"),
            {"channel": channel + "%"},
        )
        return pids.scalars().first()


async def _kill_and_reopen(engine: AsyncEngine, wakeups: Wakeups, channel: str) -> None:
    """Kill the listen connection's backend; return once ``wakeups`` listens again on a
    new one (its loops call ``ensure_listening`` between polls)."""
    killed = await _listener(engine, channel)
    assert killed is not None
    async with engine.begin() as conn:
        await conn.execute(select(func.pg_terminate_backend(killed)))

    async def reopened() -> bool:
        await wakeups.ensure_listening()
        return await _listener(engine, channel) not in (None, killed)

    await eventually(reopened, "a new listen connection")


async def test_a_killed_listen_connection_is_reopened(engine: AsyncEngine) -> None:
    wakeups = Wakeups(engine)
    try:
        event = await wakeups.subscribe("legato_test_channel")
        await _notify(engine, "legato_test_channel")
        await asyncio.wait_for(event.wait(), timeout=5)
        event.clear()

        await _kill_and_reopen(engine, wakeups, "legato_test_channel")

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


async def test_what_was_absorbed_is_forgotten_when_the_listen_connection_is_reopened(
    engine: AsyncEngine,
) -> None:
    """An absorbed notification lost with the listen connection does not swallow the next
    real one from the same backend."""
    wakeups = Wakeups(engine)
    heard: list[str] = []
    try:
        await wakeups.subscribe("legato_test_channel", heard.append)
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            # A commit on this backend will notify; it is lost with the listen connection.
            wakeups.absorb("legato_test_channel", driver.get_server_pid())
            await _kill_and_reopen(engine, wakeups, "legato_test_channel")
            await conn.execute(select(func.pg_notify("legato_test_channel", "real")))
            await conn.commit()
        await eventually(lambda: heard == ["real"], "the notification after the reconnect")
    finally:
        await wakeups.close()
