"""Legato's sessions time out on a lock someone else holds, and on a transaction left
idle: the defaults, the keywords that override them, and a loop carrying on."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import text

from legato import Client, Runtime
from legato.db import create_engine
from tests.e2e import flows
from tests.helpers import eventually


async def _show(url: str, **options: Any) -> list[str]:
    engine = create_engine(url, "legato", **options)
    try:
        async with engine.connect() as conn:
            names = ("lock_timeout", "idle_in_transaction_session_timeout")
            return [(await conn.execute(text(f"SHOW {name}"))).scalar_one() for name in names]
    finally:
        await engine.dispose()


async def test_sessions_time_out_on_locks_and_idle_transactions_by_default(
    database_url: str,
) -> None:
    assert await _show(database_url) == ["30s", "5min"]


async def test_the_timeouts_are_overridden_or_left_to_the_server(database_url: str) -> None:
    assert await _show(
        database_url, lock_timeout="2s", idle_in_transaction_session_timeout="1min"
    ) == ["2s", "1min"]
    assert await _show(
        database_url, lock_timeout=None, idle_in_transaction_session_timeout=None
    ) == ["0", "0"]


async def test_a_loop_blocked_by_someone_elses_lock_logs_and_carries_on(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(database_url, "legato", lock_timeout="200ms")
    other = create_engine(database_url, "legato", lock_timeout=None)
    try:
        async with Client(engine, app=flows.app) as client:
            handle = await client.start(flows.chain, 1)
            async with other.connect() as holder:
                await holder.execute(
                    text("LOCK TABLE legato.decide_queue IN ACCESS EXCLUSIVE MODE")
                )
                with caplog.at_level(logging.WARNING, logger="legato"):
                    async with Runtime(engine, flows.app, poll_interval=0.1):

                        def timed_out() -> bool:
                            return any(
                                "tick failed" in r.getMessage() and "lock timeout" in r.getMessage()
                                for r in caplog.records
                            )

                        await eventually(timed_out, "a loop to log its lock timeout")
                        await holder.rollback()  # the lock is released: the loop carries on
                        assert await handle.result(timeout=30) == 5
    finally:
        await engine.dispose()
        await other.dispose()
