"""The fair claim of a fair queue (``FairShare``): attempts of different fair keys taken
round-robin by weight, within one shard key and queue.

One statement chooses, locks and leases:

1. ``fair_keys``: the distinct keys with unleased rows, a loose index scan of
   ``ix_task_queue_fair`` (a recursive CTE: each step one index descent to the next
   key), so a backlog of 100k rows of one key costs one step, not 100k rows.
2. ``running``: each key's leased rows (``ix_task_queue_leased``; at most the
   workers' slots).
3. ``ranked``: per key (``LATERAL``) its best available rows, highest priority first,
   then oldest, at most ``limit``; the n-th of a key running r attempts gets the turn
   ``(r + n) / weight``, and the ``limit`` lowest turns win. The key with the fewest
   attempts running per weight goes first, so a worker freeing one slot at a time
   still alternates between keys.
4. ``candidates``: those rows locked, ``MATERIALIZED ... FOR UPDATE SKIP LOCKED`` by
   primary key (``task_id = ANY(ARRAY(ranked))``: an InitPlan, no join rescanning
   the partitions; ``claims.locked``), then leased by primary key as ``claim`` does.

Rows without a key (enqueued before their task declared fair share, or by a decider
whose app lacks it) are not in the index: when the fair claim leaves slots free, the
ordinary claim takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    Float,
    Integer,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    func,
    select,
    true,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import task_queue
from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import in_array, shard_param, text_array
from legato.engine.repositories.task_queue import Candidate, Claimed
from legato.schema import TaskQueue, Tasks, TaskState


def _queue_of_key(table: Any) -> tuple[Any, ...]:
    """Rows of ``table`` (``task_queue`` or an alias) of key ``in_shard`` and queue
    ``in_queue``."""
    return (table.c.shard == shard_param(), table.c.queue == bindparam("in_queue", type_=Text()))


def _fair_keys() -> CTE:
    """The distinct fair keys with unleased rows, smallest first: a loose index scan."""
    waiting = TaskQueue.table
    first = (
        select(waiting.c.fair_key)
        .where(
            *_queue_of_key(waiting),
            waiting.c.lease_expires_at.is_(None),
            waiting.c.fair_key.is_not(None),
        )
        .order_by(waiting.c.fair_key)
        .limit(1)
    )
    keys = first.cte("fair_keys", recursive=True)
    later = TaskQueue.table.alias("later")
    following = (
        select(later.c.fair_key)
        .where(
            *_queue_of_key(later),
            later.c.lease_expires_at.is_(None),
            later.c.fair_key > keys.c.fair_key,
        )
        .order_by(later.c.fair_key)
        .limit(1)
        .scalar_subquery()
    )
    return keys.union_all(select(following).where(keys.c.fair_key.is_not(None)))


def _running() -> CTE:
    """How many rows of each fair key are leased."""
    leased = TaskQueue.table
    return (
        select(leased.c.fair_key, func.count().label("n"))
        .where(
            *_queue_of_key(leased),
            leased.c.lease_expires_at.is_not(None),
            leased.c.fair_key.is_not(None),
        )
        .group_by(leased.c.fair_key)
        .cte("running")
    )


def _ranked() -> CTE:
    """The ``limit`` available rows with the lowest turns, and each one's turn."""
    keys, running = _fair_keys(), _running()
    rows = TaskQueue.table.alias("fair_rows")
    best_first = (rows.c.priority.desc(), rows.c.available_at)
    per_key = (
        select(
            rows.c.queue,
            rows.c.task_id,
            rows.c.run_id,
            rows.c.attempt,
            rows.c.task_name,
            rows.c.priority,
            rows.c.available_at,
            func.coalesce(rows.c.fair_weight, 1).label("weight"),
            func.row_number().over(order_by=best_first).label("position"),
        )
        .where(
            *_queue_of_key(rows),
            rows.c.fair_key == keys.c.fair_key,
            in_array(rows.c.task_name, text_array("task_names")),
            rows.c.lease_expires_at.is_(None),
            rows.c.available_at <= func.now(),
        )
        .order_by(*best_first)
        .limit(bindparam("limit", type_=Integer()))
        .lateral("per_key")
    )
    turn = (
        cast(func.coalesce(running.c.n, 0) + per_key.c.position, Float())
        / cast(per_key.c.weight, Float())
    ).label("turn")
    return (
        select(
            per_key.c.queue,
            per_key.c.task_id,
            per_key.c.run_id,
            per_key.c.attempt,
            per_key.c.task_name,
            per_key.c.priority,
            per_key.c.available_at,
            turn,
        )
        .select_from(keys)
        .join(per_key, true())
        .outerjoin(running, running.c.fair_key == keys.c.fair_key)
        .where(keys.c.fair_key.is_not(None))
        .order_by(turn, per_key.c.priority.desc(), per_key.c.available_at)
        .limit(bindparam("limit", type_=Integer()))
        .cte("ranked")
    )


def _locked(ranked: CTE) -> CTE:
    """The chosen rows locked by primary key, those another claim holds skipped, and
    those leased since the choice left out (the lock rechecks ``lease_expires_at``)."""
    queue = TaskQueue.table
    chosen: Select[Any] = select(queue.c.queue, queue.c.task_id).where(
        *_queue_of_key(queue),
        queue.c.task_id == any_(func.array(select(ranked.c.task_id).scalar_subquery())),
        queue.c.lease_expires_at.is_(None),
    )
    return locked(chosen, "candidates")


@cache
def _claim_statement() -> Any:
    return task_queue._lease_statement(_locked(_ranked()))


async def claim(
    conn: AsyncConnection,
    shard: int,
    queue: str,
    task_names: Sequence[str],
    owner: str,
    limit: int,
    lease: timedelta,
) -> list[Claimed]:
    """Lease up to ``limit`` attempts of key ``shard`` in the fair queue ``queue``,
    round-robin between its fair keys by weight (worker loop, once per dirty (key,
    queue) of a fair queue; see the module docstring), then, with slots left, the rows
    without a key by ``task_queue.claim``. ``ix_task_queue_fair`` (shard, queue,
    fair_key, priority DESC, available_at) for the keys and their rows,
    ``ix_task_queue_leased`` for the running counts, then the primary keys of
    ``task_queue``, ``tasks`` and ``runs``. Built once."""
    result = await conn.execute(
        _claim_statement(),
        {
            "in_shard": shard,
            "in_queue": queue,
            "task_names": list(task_names),
            "owner": owner,
            "limit": limit,
            "lease": lease,
        },
    )
    claimed = [Claimed(**row._asdict()) for row in result]
    if len(claimed) < limit:
        claimed += await task_queue.claim(
            conn, shard, queue, task_names, owner, limit - len(claimed), lease
        )
    return claimed


@cache
def _lock_candidates_statement() -> Any:
    ranked = _ranked()
    candidates = _locked(ranked)
    return (
        select(candidates.c.queue, candidates.c.task_id, ranked.c.task_name, Tasks.input)
        .join(ranked, ranked.c.task_id == candidates.c.task_id)
        .join(
            Tasks.table,
            and_(Tasks.run_id == ranked.c.run_id, Tasks.id == ranked.c.task_id),
        )
        .where(
            Tasks.shard == shard_param(),
            Tasks.attempt == ranked.c.attempt,
            Tasks.state == TaskState.QUEUED,
        )
        .order_by(ranked.c.turn, ranked.c.priority.desc(), ranked.c.available_at)
    )


async def lock_candidates(
    conn: AsyncConnection, shard: int, queue: str, task_names: Sequence[str], limit: int
) -> list[Candidate]:
    """Lock up to ``limit`` available attempts of key ``shard`` in the fair queue
    ``queue`` in fair order, with their inputs (worker's limited claim of a fair queue,
    first statement of its transaction), then, with room left, rows without a key by
    ``task_queue.lock_candidates``; the caller admits and leases them as with
    ``task_queue.lock_candidates``. ``ix_task_queue_fair``, ``ix_task_queue_leased``,
    then the primary keys of ``task_queue`` and ``tasks``."""
    result = await conn.execute(
        _lock_candidates_statement(),
        {"in_shard": shard, "in_queue": queue, "task_names": list(task_names), "limit": limit},
    )
    fair = [Candidate(**row._asdict()) for row in result]
    if len(fair) >= limit:
        return fair
    # This transaction's own locks do not make SKIP LOCKED skip: drop the rows it has.
    taken = {candidate.task_id for candidate in fair}
    rest = await task_queue.lock_candidates(conn, shard, queue, task_names, limit)
    return fair + [c for c in rest if c.task_id not in taken][: limit - len(fair)]
