"""``idempotency_keys``: start idempotency, unpartitioned (see docs/schema.md)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.expiry import delete_expired
from legato.schema import IdempotencyKeys


async def claim(
    conn: AsyncConnection,
    shard: int,
    namespace: str,
    key: str,
    run_id: uuid.UUID,
    expires_at: datetime,
) -> uuid.UUID | None:
    """Record ``key`` for ``run_id`` in the start's key ``shard`` (Client.start, the
    schedule loop): the key of the caller's ``shard_key``, else of the idempotency key
    itself, so a retry computes the same one. Returns the run id already holding the
    key, or None when this call took it. Concurrent starts with one key wait on the
    primary key's (shard, namespace, key) unique check, so exactly one run is created."""
    inserted = await conn.execute(
        insert(IdempotencyKeys.table)
        .values(shard=shard, namespace=namespace, key=key, run_id=run_id, expires_at=expires_at)
        .on_conflict_do_nothing(
            index_elements=[
                IdempotencyKeys.shard,
                IdempotencyKeys.namespace,
                IdempotencyKeys.key,
            ]
        )
        .returning(IdempotencyKeys.run_id)
    )
    if inserted.first() is not None:
        return None
    existing = await conn.execute(
        select(IdempotencyKeys.run_id).where(
            IdempotencyKeys.shard == shard,
            IdempotencyKeys.namespace == namespace,
            IdempotencyKeys.key == key,
        )
    )
    return existing.scalar_one()


async def prune(conn: AsyncConnection, limit: int = 10_000) -> int:
    """Fan-out across shard keys: delete expired keys of every key (maintenance in the
    decider process; never on a hot path). Served by ``ix_idempotency_keys_expires_at``."""
    return await delete_expired(conn, IdempotencyKeys.table, IdempotencyKeys.expires_at, limit)
