"""``task_queue`` after the claim: the leases of claimed attempts kept alive, given back
and found expired, what a worker still holds, and the rows of finished attempts removed.

Like ``task_queue``'s, every statement here works within one shard key, but for the
``*_held`` statements of a single-node installation (``shard = ANY`` over the keys a
loop holds) and the marked fan-out (``leased_by``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import Delete, SmallInteger, Text, bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import concurrency
from legato.engine.repositories.params import (
    SHARD_PARAM,
    SHARDS_PARAM,
    fan_out,
    in_array,
    shard_param,
    shards_param,
    text_array,
    uuid_array,
)
from legato.engine.repositories.precompiled import execute_in
from legato.engine.repositories.task_queue import queue_keys
from legato.schema import TaskQueue
from legato.schema.layout import routed as routes


async def extend_leases(
    conn: AsyncConnection,
    shard: int,
    owner: str,
    keys: Sequence[tuple[str, uuid.UUID]],
    lease: timedelta,
) -> set[uuid.UUID]:
    """Extend the leases of a worker's in-flight attempts of key ``shard``, and the
    concurrency slots they hold, in one statement (worker's lease keeper, one per key).
    Returns the task ids still leased by ``owner``: a missing one was cancelled or timed
    out, and the worker cancels it. Primary key."""
    if not keys:
        return set()
    task_ids = uuid_array("slot_task_ids", [task_id for _, task_id in keys])
    slots = concurrency.extended(task_ids, bindparam("slot_owner", owner, type_=Text()), lease)
    result = await conn.execute(
        update(TaskQueue.table)
        .where(*queue_keys(shard, keys), TaskQueue.lease_owner == owner)
        .values(lease_expires_at=func.now() + lease)
        .returning(TaskQueue.task_id)
        .add_cte(slots)
    )
    return set(result.scalars())


async def extend_held(
    conn: AsyncConnection,
    owner: str,
    keys: Sequence[tuple[int, str, uuid.UUID]],
    lease: timedelta,
) -> set[uuid.UUID]:
    """:func:`extend_leases` of attempts of any key, given as (shard, queue, task_id), in
    ONE statement (worker's lease keeper on a single-node installation). One statement
    locks its queue rows in primary-key order and then their slots, as the report
    flush's :func:`remove_held` does, so the two cannot deadlock over an attempt that
    finishes while its lease is extended. Primary key."""
    if not keys:
        return set()
    task_ids = [task_id for _, _, task_id in keys]
    slots = concurrency.extended(
        uuid_array("slot_task_ids", task_ids), bindparam("slot_owner", owner, type_=Text()), lease
    )
    result = await conn.execute(
        update(TaskQueue.table)
        .where(
            in_array(TaskQueue.shard, shards_param()),
            in_array(TaskQueue.queue, text_array("queues", sorted({q for _, q, _ in keys}))),
            in_array(TaskQueue.task_id, uuid_array("task_ids", task_ids)),
            TaskQueue.lease_owner == owner,
        )
        .values(lease_expires_at=func.now() + lease)
        .returning(TaskQueue.task_id)
        .add_cte(slots),
        {SHARDS_PARAM: sorted({shard for shard, _, _ in keys})},
    )
    return set(result.scalars())


async def release(
    conn: AsyncConnection, shard: int, owner: str, keys: Sequence[tuple[str, uuid.UUID]]
) -> None:
    """Drop ``owner``'s leases of key ``shard``, and free their concurrency slots, so
    another worker claims the attempts at once (worker graceful shutdown, one statement
    per key). Primary key."""
    if not keys:
        return
    holders = uuid_array("slot_task_ids", [task_id for _, task_id in keys])
    statement = (
        update(TaskQueue.table)
        .where(*queue_keys(shard, keys), TaskQueue.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None)
    )
    if routes(conn):  # the slots (on the coordinator) by a statement of their own
        await concurrency.free(conn, holders)
    else:
        statement = statement.add_cte(concurrency.freed(holders))
    await conn.execute(statement)


@dataclass(frozen=True)
class Expired:
    queue: str
    task_id: uuid.UUID
    run_id: uuid.UUID
    attempt: int


async def expired(conn: AsyncConnection, shard: int, limit: int) -> list[Expired]:
    """Leased rows of key ``shard`` whose lease has expired (lease sweeper, per held
    key): their worker is gone.

    Not locked here: the sweeper's report takes the run's decide row first (one lock
    order everywhere), and a second sweeper's report of the same row is fenced out.
    Served by the partial index ``ix_task_queue_leased`` (shard, lease_expires_at).
    """
    result = await conn.execute(
        select(TaskQueue.queue, TaskQueue.task_id, TaskQueue.run_id, TaskQueue.attempt)
        .where(
            TaskQueue.shard == bindparam("in_shard", shard, type_=SmallInteger()),
            TaskQueue.lease_expires_at.is_not(None),
            TaskQueue.lease_expires_at < func.now(),
        )
        .order_by(TaskQueue.lease_expires_at)
        .limit(limit)
    )
    return [Expired(*row) for row in result]


async def expired_held(conn: AsyncConnection, keys: Sequence[int], limit: int) -> list[Expired]:
    """:func:`expired` over every key in ``keys`` in ONE statement (lease sweeper of a
    single-node installation, one read per round over its held keys), oldest lease
    first. ``ix_task_queue_leased`` (shard, lease_expires_at), one range per key."""
    result = await conn.execute(
        select(TaskQueue.queue, TaskQueue.task_id, TaskQueue.run_id, TaskQueue.attempt)
        .where(
            in_array(TaskQueue.shard, shards_param()),
            TaskQueue.lease_expires_at.is_not(None),
            TaskQueue.lease_expires_at < func.now(),
        )
        .order_by(TaskQueue.lease_expires_at)
        .limit(limit),
        {"in_shards": list(keys)},
    )
    return [Expired(*row) for row in result]


async def leased_by(conn: AsyncConnection, owner: str) -> int:
    """Fan-out across shard keys: how many rows ``owner`` still leases, in every key
    (tests of graceful shutdown, ``legato`` status; never on a hot path)."""
    result = await conn.execute(
        fan_out(
            select(func.count()).select_from(TaskQueue.table).where(TaskQueue.lease_owner == owner)
        )
    )
    return int(result.scalar_one())


async def remove(
    conn: AsyncConnection,
    shard: int,
    keys: Sequence[tuple[str, uuid.UUID]],
    *,
    unleased: bool = False,
) -> None:
    """Delete finished attempts' rows of key ``shard`` and free their concurrency slots
    (worker reports, timer loop, sweeper, decider's cancellations; one statement per
    key); with ``unleased``, only rows no worker holds (which hold no slot). Primary
    key."""
    if not keys:
        return
    params = {SHARD_PARAM: shard, **_removed(keys)}
    if routes(conn) and not unleased:
        # The slots stay on the coordinator: freed by a statement of their own.
        await concurrency.free(conn, uuid_array("slot_task_ids", params["task_ids"]))
        await conn.execute(_removal(False, False, frees_slots=False), params)
    else:
        await execute_in(conn, _removal(False, unleased), params)


async def remove_held(
    conn: AsyncConnection,
    keys: Sequence[tuple[int, str, uuid.UUID]],
    *,
    unleased: bool = False,
) -> None:
    """:func:`remove` of rows of any key, given as (shard, queue, task_id), in ONE
    statement (report flushes of a single-node installation): each row matched in its
    own key (``shard = ANY`` over the flush's keys with the queues and task ids). Primary
    key."""
    if keys:
        await execute_in(conn, removal_held(unleased), removal_held_params(keys))


def removal_held(unleased: bool = False) -> Delete:
    """:func:`remove_held`'s statement (also a part of ``report_write``'s), bound by
    :func:`removal_held_params`."""
    return _removal(True, unleased)


def removal_held_params(keys: Sequence[tuple[int, str, uuid.UUID]]) -> dict[str, Any]:
    """The parameters of :func:`removal_held` for rows (shard, queue, task_id)."""
    return {
        SHARDS_PARAM: sorted({shard for shard, _, _ in keys}),
        **_removed([(queue, task_id) for _, queue, task_id in keys]),
    }


def _removed(keys: Sequence[tuple[str, uuid.UUID]]) -> dict[str, Any]:
    task_ids = [task_id for _, task_id in keys]
    return {
        "queues": sorted({queue for queue, _ in keys}),
        "task_ids": task_ids,
        "slot_task_ids": task_ids,
    }


@cache
def _removal(spanning: bool, unleased: bool, frees_slots: bool = True) -> Delete:
    """The statement of :func:`remove` (one key) or :func:`remove_held` (the keys given),
    built once: every value is a parameter, so a flush costs no statement building.
    Without ``frees_slots`` the caller frees the slots by a statement of its own (a
    distributed install: the slots stay on the coordinator)."""
    key = (
        in_array(TaskQueue.shard, shards_param()) if spanning else TaskQueue.shard == shard_param()
    )
    statement = delete(TaskQueue.table).where(
        key,
        in_array(TaskQueue.queue, text_array("queues")),
        in_array(TaskQueue.task_id, uuid_array("task_ids")),
    )
    if unleased:
        return statement.where(TaskQueue.lease_expires_at.is_(None))
    if not frees_slots:
        return statement
    return statement.add_cte(concurrency.freed(uuid_array("slot_task_ids")))
