"""``timers``: sleeps, event timeouts and task timeouts, partitioned daily by fire time.

``due_at`` is when the timer really fires; ``fire_at`` is capped at the timer
partitions' horizon, and a timer that fires before it is due is simply re-armed,
so arbitrarily long sleeps need neither a DEFAULT partition nor years of partitions.

A timer lives in its run's shard key (the parameter ``shard``, first in the primary key
(shard, fire_at, id)): the timer loop takes due timers one key at a time (distributed
layout) or across its held keys in one take (one PostgreSQL).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import (
    DateTime,
    Insert,
    Integer,
    bindparam,
    delete,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningDelete

from legato.engine.repositories import routed
from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import (
    SHARD_PARAM,
    SHARDS_PARAM,
    Unnest,
    in_array,
    run_shard,
    shard_param,
    shards_param,
)
from legato.schema import TimerKind, Timers

# The partition maintenance creates timer partitions a week ahead; stay inside them
# even if maintenance has not run for a day.
HORIZON = timedelta(days=6)

_TIME = DateTime(timezone=True)


def capped_fire_at(due_at: datetime, now: datetime) -> datetime:
    """When to store a timer: its due time, or the horizon if that is later (pure)."""
    return min(due_at, now + HORIZON)


class DueTimer(NamedTuple):
    """A ``timers`` row: the one a decision arms, and the one the timer loop takes (its
    key is its run's, ``Shards.of_run(run_id)``; the take's statement is of one key)."""

    fire_at: datetime
    id: uuid.UUID
    run_id: uuid.UUID
    task_id: uuid.UUID
    attempt: int
    kind: TimerKind
    due_at: datetime


_TIMERS = Unnest("new_timers", DueTimer, Timers)


async def arm(conn: AsyncConnection, shard: int, timers: Sequence[DueTimer], now: datetime) -> None:
    """Store timers of runs of key ``shard``, capped at the partitions' horizon: new ones
    (decider loop) and those that fired at the horizon before they were due (timer
    loop). One INSERT over ``unnest`` of array parameters, built once."""
    if timers:
        await conn.execute(armed(), armed_params(shard, timers, now))


@cache
def armed(spanning: bool = False) -> Insert:
    """:func:`arm`'s INSERT, every row in key ``:shard`` (also a CTE of
    ``decisions.write``)."""
    return _TIMERS.insert(
        shard=run_shard(_TIMERS.value("run_id")) if spanning else shard_param()
    )


@cache
def armed_routed() -> Insert:
    """:func:`armed` on a distributed install (``routed.anchored``: the timers joined to
    their runs of key ``:in_shard``, so Citus routes it to the key's node); a statement
    of ``decisions.write`` of its own there, bound by :func:`armed_params`."""
    return routed.anchored(_TIMERS)


def armed_params(shard: int, timers: Sequence[DueTimer], now: datetime) -> dict[str, Any]:
    return {
        **_TIMERS.bind([t._replace(fire_at=capped_fire_at(t.due_at, now)) for t in timers]),
        SHARD_PARAM: shard,
    }


@cache
def _take_due_statement(spanning: bool) -> ReturningDelete[
    datetime, uuid.UUID, uuid.UUID, uuid.UUID, int, TimerKind, datetime
]:
    key = in_array(Timers.shard, shards_param()) if spanning else Timers.shard == shard_param()
    due = locked(
        select(Timers.shard, Timers.fire_at, Timers.id)
        .where(key, Timers.fire_at <= bindparam("now", type_=_TIME))
        .order_by(Timers.fire_at)
        .limit(bindparam("limit", type_=Integer())),
        "due",
    )
    return (
        delete(Timers.table)
        .where(
            Timers.shard == (due.c.shard if spanning else shard_param()),
            Timers.fire_at == due.c.fire_at,
            Timers.id == due.c.id,
        )
        .returning(
            Timers.fire_at,
            Timers.id,
            Timers.run_id,
            Timers.task_id,
            Timers.attempt,
            Timers.kind,
            Timers.due_at,
        )
    )


async def take_due(conn: AsyncConnection, shard: int, limit: int, now: datetime) -> list[DueTimer]:
    """Delete and return up to ``limit`` timers of key ``shard`` due by ``now`` (timer
    loop, one take per held key), oldest first.

    ``FOR UPDATE SKIP LOCKED`` so timer loops share the work; deleted in the same
    transaction that acts on them, so a crash puts them back. Served by the primary
    key ``(shard, fire_at, id)`` (pruned to today's and earlier partitions). Built once.
    """
    result = await conn.execute(
        _take_due_statement(False), {SHARD_PARAM: shard, "limit": limit, "now": now}
    )
    return [DueTimer(*row) for row in result]


async def take_due_held(
    conn: AsyncConnection, keys: Sequence[int], limit: int, now: datetime
) -> list[DueTimer]:
    """:func:`take_due` over every key in ``keys`` in ONE statement (timer loop of a
    single-node installation, one take per round over its held keys), oldest first
    across them; the same locks. The primary key (shard, fire_at, id), one range per key
    (``shard = ANY``)."""
    result = await conn.execute(
        _take_due_statement(True), {SHARDS_PARAM: list(keys), "limit": limit, "now": now}
    )
    return [DueTimer(*row) for row in result]
