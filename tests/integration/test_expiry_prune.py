"""Maintenance prunes of expiring tables: expired rows go, live rows stay, batches bounded."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.repositories import idempotency_keys, task_cache
from legato.schema import IdempotencyKeys, TaskCache


async def test_task_cache_prune_deletes_only_expired_entries_up_to_the_limit(
    engine: AsyncEngine,
) -> None:
    past, future = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(
            insert(TaskCache.table),
            [
                {"task_name": "t", "key": f"old{n}", "output": n, "expires_at": past}
                for n in range(3)
            ]
            + [{"task_name": "t", "key": "live", "output": 9, "expires_at": future}],
        )
        assert await task_cache.prune(conn, limit=2) == 2
        assert await task_cache.prune(conn) == 1
        assert await task_cache.prune(conn) == 0
        assert await task_cache.lookup(conn, "t", "live") == (True, 9)


async def test_idempotency_keys_prune_deletes_only_expired_keys_up_to_the_limit(
    engine: AsyncEngine,
) -> None:
    past, future = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(
            insert(IdempotencyKeys.table),
            [
                {
                    "shard": n % 2,
                    "namespace": "ns",
                    "key": f"old{n}",
                    "run_id": uuid.uuid4(),
                    "expires_at": past,
                }
                for n in range(3)
            ]
            + [
                {
                    "shard": 0,
                    "namespace": "ns",
                    "key": "live",
                    "run_id": uuid.uuid4(),
                    "expires_at": future,
                }
            ],
        )
        assert await idempotency_keys.prune(conn, limit=2) == 2
        assert await idempotency_keys.prune(conn) == 1
        left = await conn.execute(
            select(IdempotencyKeys.key, func.count()).group_by(IdempotencyKeys.key)
        )
        assert left.all() == [("live", 1)]
