"""Bounded deletion of expired rows, shared by the tables maintenance prunes by ``expires_at``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Table, and_, delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import fan_out


async def delete_expired(
    conn: AsyncConnection, table: Table, expires_at: Column[Any], limit: int
) -> int:
    """Fan-out across shard keys (for a run-scoped table such as ``idempotency_keys``):
    delete at most ``limit`` rows of ``table`` whose ``expires_at`` has passed, matched
    by primary key (joined, the key's ``shard`` first where it has one) so each batch is one
    bounded statement; the caller's table has an index on ``expires_at`` to serve the
    inner select. Returns how many were deleted."""
    key = tuple(table.primary_key.columns)
    expired = select(*key).where(expires_at < func.now()).limit(limit).subquery("expired")
    # A join on the key, not ``(key) IN (subquery)``: Citus refuses the row comparison
    # ("subquery has too many columns") on its tables, and plans the join on one server.
    matched = and_(*(column == expired.c[column.name] for column in key))
    pruned = fan_out(delete(table).where(matched).returning(key[0]))
    result = await conn.execute(pruned)
    return len(result.all())
