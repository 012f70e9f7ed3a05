"""A second ``legato db upgrade`` waits for the first to finish, however long that takes:
the sessions' ``lock_timeout`` does not bound the wait for the migration lock."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from legato import migrations
from legato.db import create_engine
from tests.helpers import eventually

_WAITING_LONGER_THAN_ITS_LOCK_TIMEOUT = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND wait_event = 'advisory' "
    "AND clock_timestamp() - query_start > interval '1 second'"
)


async def test_an_upgrade_waits_past_lock_timeout_for_one_in_progress(
    empty_database_url: str,
) -> None:
    first = create_engine(empty_database_url, "legato", lock_timeout=None)
    second = create_engine(empty_database_url, "legato", lock_timeout="100ms")
    try:
        async with first.connect() as holder:  # an upgrade in progress holds the lock
            await holder.execute(
                text("SELECT pg_advisory_lock(hashtext('legato-migrations:legato'))")
            )
            await holder.commit()
            waiting = asyncio.create_task(migrations.upgrade(second, "legato"))

            async def waited_ten_lock_timeouts() -> bool:
                assert not waiting.done(), waiting  # it failed instead of waiting
                waited = (await holder.execute(_WAITING_LONGER_THAN_ITS_LOCK_TIMEOUT)).scalar()
                await holder.rollback()  # pg_stat_activity is read once per transaction
                return bool(waited)

            await eventually(waited_ten_lock_timeouts, "the second upgrade to wait on the lock")
            await holder.execute(text("SELECT pg_advisory_unlock_all()"))
            await holder.commit()
            await waiting
        state = await migrations.state(second, "legato")
        assert state.up_to_date
    finally:
        await first.dispose()
        await second.dispose()
