"""The settings of a transactional task's transaction (``@task(transactional=True)``)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection


async def bound(conn: AsyncConnection, limit: timedelta) -> None:
    """Bound the transaction the worker opens for a transactional task by the task's
    ``start_to_close``: no statement of the body may run longer, and the session is
    ended if it sits idle in the transaction that long (a frozen worker must not hold
    its row locks for ever). The body's own statements are planned as PostgreSQL
    would by default (``plan_cache_mode`` ``auto``, not the engine's forced generic
    plans). ``SET LOCAL`` semantics: all three end with the transaction.

    Called by ``worker_attempts.run_transactional``, first in the transaction; reads no table,
    so no index.
    """
    milliseconds = str(max(round(limit.total_seconds() * 1000), 1))
    await conn.execute(
        select(
            func.set_config("statement_timeout", milliseconds, True),
            func.set_config("idle_in_transaction_session_timeout", milliseconds, True),
            func.set_config("plan_cache_mode", "auto", True),
        )
    )
