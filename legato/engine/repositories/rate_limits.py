"""``rate_buckets``: one token bucket per rate-limit key, shared by every worker.

The limited claim locks the buckets it needs (``FOR UPDATE SKIP LOCKED``: a bucket
another claim is spending is skipped this round, never waited on), refills them from
the elapsed time, takes one token per attempt it leases and writes them back, all in
its own transaction (see ``legato.engine.admission``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Double, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.claims import locked
from legato.engine.repositories.concurrency import SlotKey
from legato.engine.repositories.params import rows_of, text_array, time_array
from legato.schema import RateBuckets


def _float_array(name: str) -> Any:
    return bindparam(name, type_=ARRAY(Double()))


@dataclass(frozen=True)
class Bucket:
    tokens: float
    updated_at: datetime
    now: datetime


async def ensure(conn: AsyncConnection, capacities: Mapping[SlotKey, int]) -> None:
    """Create the missing buckets, full (worker's limited claim); in key order, so two
    claims creating the same buckets cannot deadlock. Primary key."""
    if capacities:
        ordered = sorted(capacities.items())
        await conn.execute(
            _ensure_statement(),
            {
                "names": [name for (name, _), _ in ordered],
                "keys": [key for (_, key), _ in ordered],
                "tokens": [float(size) for _, size in ordered],
            },
        )


@cache
def _ensure_statement() -> Any:
    given = rows_of(
        "given",
        limit_name=text_array("names"),
        key=text_array("keys"),
        tokens=_float_array("tokens"),
    )
    rows = select(given.c.limit_name, given.c.key, given.c.tokens).order_by(
        given.c.limit_name, given.c.key
    )
    return (
        insert(RateBuckets.table)
        .from_select(["limit_name", "key", "tokens"], rows)
        .on_conflict_do_nothing()
    )


async def lock(conn: AsyncConnection, keys: Sequence[SlotKey]) -> dict[SlotKey, Bucket]:
    """Lock the buckets ``keys`` no other claim is spending, ``FOR UPDATE SKIP LOCKED``
    (worker's limited claim), with the clock read after the lock was taken. Primary
    key."""
    if not keys:
        return {}
    ordered = sorted(set(keys))
    result = await conn.execute(
        _lock_statement(),
        {"names": [name for name, _ in ordered], "keys": [key for _, key in ordered]},
    )
    return {
        (name, key): Bucket(tokens=tokens, updated_at=updated_at, now=now)
        for name, key, tokens, updated_at, now in result
    }


@cache
def _lock_statement() -> Any:
    given = rows_of("given", limit_name=text_array("names"), key=text_array("keys"))
    table = RateBuckets
    buckets = locked(
        select(table.limit_name, table.key, table.tokens, table.updated_at).join(
            given, (table.limit_name == given.c.limit_name) & (table.key == given.c.key)
        ),
        "buckets",
        of=table.table,
    )
    return select(
        buckets.c.limit_name,
        buckets.c.key,
        buckets.c.tokens,
        buckets.c.updated_at,
        func.clock_timestamp(),
    )


async def store(conn: AsyncConnection, buckets: Mapping[SlotKey, Bucket]) -> None:
    """Write back locked buckets: what is left and when it was counted (worker's
    limited claim). Primary key."""
    if buckets:
        await conn.execute(
            _store_statement(),
            {
                "names": [name for name, _ in buckets],
                "keys": [key for _, key in buckets],
                "tokens": [b.tokens for b in buckets.values()],
                "times": [b.updated_at for b in buckets.values()],
            },
        )


@cache
def _store_statement() -> Any:
    given = rows_of(
        "given",
        limit_name=text_array("names"),
        key=text_array("keys"),
        tokens=_float_array("tokens"),
        updated_at=time_array("times"),
    )
    table = RateBuckets
    return (
        update(table.table)
        .where(table.limit_name == given.c.limit_name, table.key == given.c.key)
        .values(tokens=given.c.tokens, updated_at=given.c.updated_at)
    )
