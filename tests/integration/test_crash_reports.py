"""A crashed backend is reported with the statement it ran (its own throwaway server)."""

from __future__ import annotations

import asyncio
import os
import signal

import asyncpg
import pytest

from legato.embedded import LocalPostgres

pytestmark = pytest.mark.timeout(120)


async def test_a_backend_killed_by_a_signal_is_reported_with_its_statement() -> None:
    server = LocalPostgres().start()
    try:
        assert server.crash_reports() == []
        victim = await asyncpg.connect(server.url())
        pid = await victim.fetchval("SELECT pg_backend_pid()")
        sleeping = asyncio.create_task(victim.fetchval("SELECT pg_sleep(30) /* the victim */"))
        await asyncio.sleep(0.5)
        os.kill(pid, signal.SIGSEGV)  # as a PostgreSQL bug would
        with pytest.raises(asyncpg.PostgresConnectionError):
            await sleeping
        for _ in range(100):  # the postmaster logs the crash once it has reaped the backend
            reports = "\n".join(server.crash_reports())
            if reports:
                break
            await asyncio.sleep(0.1)
        assert f"(PID {pid}) was terminated by signal 11" in reports, reports
        assert "the victim" in reports, reports
        await _wait_until_it_accepts_connections(server)  # PostgreSQL recovers by itself
    finally:
        server.stop()


async def _wait_until_it_accepts_connections(server: LocalPostgres) -> None:
    for _ in range(100):
        try:
            await (await asyncpg.connect(server.url())).close()
            return
        except (OSError, asyncpg.PostgresError):
            await asyncio.sleep(0.1)
    raise AssertionError("the server did not recover from the crash")
