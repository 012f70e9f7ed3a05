"""``task_cache``: task outputs by (task name, input key), reused until they expire."""

from __future__ import annotations

from datetime import timedelta

from pydantic import JsonValue
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.expiry import delete_expired
from legato.schema import TaskCache


async def lookup(conn: AsyncConnection, task_name: str, key: str) -> tuple[bool, JsonValue]:
    """The unexpired cached output of (``task_name``, ``key``): ``(True, output)``, or
    ``(False, None)`` on a miss (worker, before running a cached task). Primary key."""
    result = await conn.execute(
        select(TaskCache.output).where(
            TaskCache.task_name == task_name,
            TaskCache.key == key,
            TaskCache.expires_at > func.now(),
        )
    )
    row = result.first()
    return (False, None) if row is None else (True, row[0])


async def store(
    conn: AsyncConnection, task_name: str, key: str, output: JsonValue, expires: timedelta
) -> None:
    """Cache ``output`` for ``expires`` (worker, after a cached task succeeded); a later
    success with the same key replaces it. Primary key."""
    statement = insert(TaskCache.table).values(
        task_name=task_name, key=key, output=output, expires_at=func.now() + expires
    )
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[TaskCache.task_name, TaskCache.key],
            set_={
                "output": statement.excluded.output,
                "created_at": func.now(),
                "expires_at": statement.excluded.expires_at,
            },
        )
    )


async def prune(conn: AsyncConnection, limit: int = 10_000) -> int:
    """Delete expired entries (maintenance in the decider process). Served by
    ``ix_task_cache_expires_at``."""
    return await delete_expired(conn, TaskCache.table, TaskCache.expires_at, limit)
