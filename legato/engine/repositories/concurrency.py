"""``concurrency_slots``: one row per unit of a concurrency limit.

An attempt counted against a limit holds one free row of it from its claim until its
result is written (``queue_leases.remove``), its lease is released, or its lease expires:
the row's ``expires_at`` is the holder's lease expiry, extended with it, so a slot of a
killed worker frees itself when the lease does. Slots are taken with ``FOR UPDATE SKIP
LOCKED`` and the freeness test is on the locked row itself, so two claims can never
hold one slot (see docs/design.md, "Concurrency limits").
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import CTE, Interval, Text, Update, bindparam, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import BindParameter

from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import in_array, int_array, rows_of, text_array, uuid_array
from legato.schema import ConcurrencySlots

SlotKey = tuple[str, str]
"""(limit name, key)."""

# Free slot rows idle this long are deleted by maintenance (a per-customer key that
# is no longer used); the claim recreates them when the key comes back.
IDLE_SLOTS_KEPT = timedelta(days=1)


def _given() -> Any:
    return rows_of(
        "given", limit_name=text_array("names"), key=text_array("keys"), size=int_array("sizes")
    )


def _sizes(limits: Mapping[SlotKey, int]) -> dict[str, list[Any]]:
    ordered = sorted(limits.items())
    return {
        "names": [name for (name, _), _ in ordered],
        "keys": [key for (_, key), _ in ordered],
        "sizes": [size for _, size in ordered],
    }


async def ensure(conn: AsyncConnection, limits: Mapping[SlotKey, int]) -> None:
    """Create the missing slot rows ``0 .. size - 1`` of each (limit, key) (worker's
    limited claim). In key order, so two claims creating the same keys wait on each
    other's inserts in one order and cannot deadlock. Primary key."""
    if limits:
        await conn.execute(_ensure_statement(), _sizes(limits))


@cache
def _ensure_statement() -> Any:
    given = _given()
    slot = func.generate_series(0, given.c.size - 1).label("slot")
    rows = select(given.c.limit_name, given.c.key, slot).order_by(
        given.c.limit_name, given.c.key, slot
    )
    return (
        insert(ConcurrencySlots.table)
        .from_select(["limit_name", "key", "slot"], rows)
        .on_conflict_do_nothing()
    )


async def lock_free(
    conn: AsyncConnection, limits: Mapping[SlotKey, int]
) -> dict[SlotKey, list[int]]:
    """Lock the free slots (no holder, or the holder's lease expired) below each limit's
    size, ``FOR UPDATE SKIP LOCKED`` (worker's limited claim): the caller's transaction
    owns them until it commits; slots another claim holds are skipped, never waited on.
    Primary key."""
    if not limits:
        return {}
    result = await conn.execute(_lock_free_statement(), _sizes(limits))
    free: dict[SlotKey, list[int]] = {}
    for name, key, slot in result:
        free.setdefault((name, key), []).append(slot)
    return free


@cache
def _lock_free_statement() -> Any:
    given = _given()
    table = ConcurrencySlots
    candidates = locked(
        select(table.limit_name, table.key, table.slot)
        .join(given, (table.limit_name == given.c.limit_name) & (table.key == given.c.key))
        .where(
            table.slot < given.c.size,
            or_(table.holder_task_id.is_(None), table.expires_at <= func.now()),
        ),
        "free_slots",
        of=table.table,
    )
    return select(candidates.c.limit_name, candidates.c.key, candidates.c.slot).order_by(
        candidates.c.limit_name, candidates.c.key, candidates.c.slot
    )


async def take(
    conn: AsyncConnection,
    slots: Sequence[tuple[str, str, int, uuid.UUID]],
    owner: str,
    lease: timedelta,
) -> None:
    """Give locked free slots (limit, key, slot) to the attempts ``task_id`` leased by
    ``owner``, expiring with their leases (worker's limited claim). Primary key."""
    if slots:
        await conn.execute(
            _take_statement(),
            {
                "names": [s[0] for s in slots],
                "keys": [s[1] for s in slots],
                "slots": [s[2] for s in slots],
                "task_ids": [s[3] for s in slots],
                "owner": owner,
                "lease": lease,
            },
        )


@cache
def _take_statement() -> Any:
    given = rows_of(
        "given",
        limit_name=text_array("names"),
        key=text_array("keys"),
        slot=int_array("slots"),
        task_id=uuid_array("task_ids"),
    )
    table = ConcurrencySlots
    return (
        update(table.table)
        .where(
            table.limit_name == given.c.limit_name,
            table.key == given.c.key,
            table.slot == given.c.slot,
        )
        .values(
            holder_task_id=given.c.task_id,
            holder_owner=bindparam("owner", type_=Text()),
            expires_at=func.now() + bindparam("lease", type_=Interval()),
        )
    )


def freed(task_ids: BindParameter[Any]) -> CTE:
    """A data-modifying CTE freeing the slots of the attempts ``task_ids`` (added to
    ``queue_leases.remove`` and ``release``, so a finished or released attempt frees its
    slots in the statement that drops or releases its lease). ``ix_concurrency_slots_holder``;
    nothing to do, and next to no cost, when no limit is in use."""
    return _freeing(task_ids).returning(ConcurrencySlots.slot).cte("freed_slots")


def _freeing(task_ids: BindParameter[Any]) -> Update:
    table = ConcurrencySlots
    return (
        update(table.table)
        .where(in_array(table.holder_task_id, task_ids))
        .values(holder_task_id=None, holder_owner=None, expires_at=func.now())
    )


async def free(conn: AsyncConnection, task_ids: BindParameter[Any]) -> None:
    """:func:`freed` as a statement of its own, in the caller's transaction
    (``queue_leases.remove`` and ``release`` on a distributed install: the slots stay on
    the coordinator, and Citus runs a statement joining them to a node's rows in two
    steps). ``ix_concurrency_slots_holder``."""
    await conn.execute(_freeing(task_ids))


def extended(task_ids: BindParameter[Any], owner: BindParameter[Any], lease: timedelta) -> CTE:
    """A data-modifying CTE extending the slots ``owner`` holds for ``task_ids`` to the
    new lease expiry (added to ``queue_leases.extend_leases``: one ``now()``, so a slot
    never expires before its holder's lease). ``ix_concurrency_slots_holder``."""
    table = ConcurrencySlots
    return (
        update(table.table)
        .where(in_array(table.holder_task_id, task_ids), table.holder_owner == owner)
        .values(expires_at=func.now() + lease)
        .returning(table.slot)
        .cte("extended_slots")
    )


async def held(conn: AsyncConnection, limit_name: str) -> int:
    """How many slots of ``limit_name`` are held now (tests, ``legato`` status). Primary
    key prefix."""
    table = ConcurrencySlots
    result = await conn.execute(
        select(func.count())
        .select_from(table.table)
        .where(
            table.limit_name == limit_name,
            table.holder_task_id.is_not(None),
            table.expires_at > func.now(),
        )
    )
    return int(result.scalar_one())


async def prune(conn: AsyncConnection, limit: int = 10_000) -> int:
    """Delete slot rows free for ``IDLE_SLOTS_KEPT`` (maintenance in the decider
    process). A claim holding one locks it, and the delete's recheck then skips it.
    Sequential scan of a small table, under ``limit`` rows per call."""
    table = ConcurrencySlots
    idle = locked(
        select(table.limit_name, table.key, table.slot)
        .where(table.holder_task_id.is_(None), table.expires_at < func.now() - IDLE_SLOTS_KEPT)
        .limit(limit),
        "idle",
    )
    result = await conn.execute(
        delete(table.table)
        .where(
            table.limit_name == idle.c.limit_name,
            table.key == idle.c.key,
            table.slot == idle.c.slot,
            table.holder_task_id.is_(None),
        )
        .returning(table.slot)
    )
    return len(result.all())
