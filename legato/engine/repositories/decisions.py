"""A batch of decisions' writes as ONE statement: one data-modifying CTE per table.

Each table's module owns its part (``tasks.inserted``, ``task_queue.enqueued``, ...);
this module only joins them, so a decision costs one round trip for its writes however
many tables it touches. Every part is within the batch's one shard key: each filters
and inserts by the one scalar parameter ``in_shard`` (``params.SHARD_PARAM``; not
``shard``, which would make each UPDATE part also SET its ``shard`` column from an
unbound copy). The parts see one snapshot and not each
other's writes, so the caller hands over writes that do not depend on one another
(``Batch.write`` folds a task created and resolved in one batch into its insert, and
deletes cancelled queue rows beforehand, in the lock order).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import CompoundSelect, Select, func, null, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import (
    outbox,
    routed,
    run_events,
    runs,
    signals,
    task_queue,
    tasks,
    timers,
)
from legato.engine.repositories.params import SHARD_COUNT_PARAM, SHARD_PARAM, SHARDS_PARAM
from legato.engine.repositories.precompiled import execute_in
from legato.schema import Shards
from legato.schema.enums import ACTIVE_TASK_STATES
from legato.schema.layout import routed as routes


@dataclass(frozen=True)
class Writes:
    """Everything a batch of decisions writes in its one statement."""

    creates: Sequence[tasks.NewTask]
    enqueues: Sequence[task_queue.NewQueueRow]
    timers: Sequence[timers.DueTimer]
    consumed: Sequence[signals.Consumption]
    moves: Sequence[tasks.Transition]  # fenced on the active states
    observed: Sequence[tuple[uuid.UUID, uuid.UUID]]  # (run id, task id), finished by others
    events: Sequence[run_events.NewEvent]
    lifecycle: Sequence[outbox.Event]
    finishes: Sequence[runs.Finish]
    # The lease of the ``enqueues`` handed to the decider's own worker (a
    # ``lease_owner``): their expiry is this past the statement's server clock.
    handed_lease: timedelta | None = None
    # False: the transaction commits without waiting for its WAL flush
    # (``decision_batch.waits_for_flush`` says when a decision may).
    waits_for_flush: bool = True


async def write(conn: AsyncConnection, shard: int, writes: Writes, now: datetime) -> set[uuid.UUID]:
    """Apply a batch's writes, all of runs of key ``shard``, in one statement (decider
    loop, under the runs' locks); returns the task ids of the fenced moves that applied
    (a stale one is absent).

    A part with no rows is an ``unnest`` of empty arrays: it writes nothing, at next
    to no cost, and the statement keeps its shape. Two parts are left out when they
    have no rows, and a batch whose commit need not wait for its flush
    (``Writes.waits_for_flush``) sets that in a branch of its own, so there are eight
    shapes. The parts left out: the ``task_queue`` insert,
    because its statement trigger NOTIFYs the workers even for no rows, and the
    ``outbox`` insert, whose join of ``runs`` and ``webhook_endpoints`` is planned
    even for no rows (most decisions neither start nor finish a run). Each part is
    served by its own table's primary key, led by the key (see each part's docstring).
    """
    params = _params(shard, writes, now)
    if routes(conn):
        return await _write_routed(conn, shard, writes, params)
    statement = _statement(
        bool(writes.enqueues), bool(writes.lifecycle), False, writes.waits_for_flush
    )
    return await _execute(conn, statement, params)


async def _write_routed(
    conn: AsyncConnection, shard: int, writes: Writes, params: dict[str, Any]
) -> set[uuid.UUID]:
    """:func:`write` on a distributed install: the parts as router statements of their
    own (``routed.write_decisions``), the outbox's first."""
    if writes.lifecycle:
        await outbox.publish(conn, shard, writes.lifecycle)
    last: dict[uuid.UUID, int] = {}
    for event in writes.events:
        last[event.run_id] = max(last.get(event.run_id, 0), event.seq)
    return await routed.write_decisions(
        conn,
        _routed_parts(writes),
        tasks.moved(),
        params,
        # As the trigger it stands for (migration 0019): rows written leased wake no one.
        enqueued=any(row.lease_owner is None for row in writes.enqueues),
        history=[f"{run_id}:{seq}" for run_id, seq in sorted(last.items())],
    )


async def write_held(
    conn: AsyncConnection, shards: Shards, writes: Writes, now: datetime
) -> set[uuid.UUID]:
    """:func:`write` of a batch of runs of any keys in ONE statement (decider loop of a
    single-node installation): the same parts, each writing or matching every row in its
    run's key, computed from the run id (``params.run_shard``, an index condition of
    each part's join), and the observed marks by ``shard = ANY`` over their runs' keys.
    The same primary keys."""
    params = _params(0, writes, now)
    del params[SHARD_PARAM]  # no part of the spanning statement has one key
    params[SHARD_COUNT_PARAM] = shards.count
    params[SHARDS_PARAM] = sorted({shards.of_run(run_id) for run_id, _ in writes.observed})
    statement = _statement(
        bool(writes.enqueues), bool(writes.lifecycle), True, writes.waits_for_flush
    )
    return await _execute(conn, statement, params)


def _params(shard: int, writes: Writes, now: datetime) -> dict[str, Any]:
    if any(frozenset(m.from_states) != ACTIVE_TASK_STATES for m in writes.moves):
        raise ValueError("a decision's moves are fenced on the active states")
    params: dict[str, Any] = {
        **tasks.inserted_params(shard, writes.creates),
        **timers.armed_params(shard, writes.timers, now),
        **signals.consumed_params(shard, writes.consumed),
        **tasks.moved_params(shard, writes.moves, ACTIVE_TASK_STATES),
        **tasks.marked_observed_params(shard, writes.observed),
        **run_events.appended_params(shard, writes.events),
        **runs.finished_params(shard, writes.finishes),
    }
    if writes.enqueues:
        params.update(task_queue.enqueued_params(shard, writes.enqueues, writes.handed_lease))
    if writes.lifecycle:
        params.update(outbox.published_params(shard, writes.lifecycle))
    return params


async def _execute(
    conn: AsyncConnection,
    statement: Select[uuid.UUID] | CompoundSelect[uuid.UUID],
    params: dict[str, Any],
) -> set[uuid.UUID]:
    # From text compiled once (``precompiled``): the statement's 77-98 parameters are
    # lists the driver encodes itself.
    return {row[0] for row in await execute_in(conn, statement, params)}


@cache
def _statement(
    enqueues: bool, publishes: bool, spanning: bool, waits_for_flush: bool
) -> Select[uuid.UUID] | CompoundSelect[uuid.UUID]:
    moved = tasks.moved(spanning).cte("moved")
    parts = [
        tasks.inserted(spanning).cte("inserted_tasks"),
        timers.armed(spanning).cte("armed_timers"),
        signals.consumed(spanning).cte("consumed_signals"),
        tasks.marked_observed(spanning).cte("observed_tasks"),
        run_events.appended(spanning).cte("appended_events"),
        runs.finished(spanning).cte("finished_runs"),
    ]
    if enqueues:
        parts.append(task_queue.enqueued(spanning).cte("enqueued_attempts"))
    if publishes:
        parts.append(outbox.published(spanning))
    moved_ids = select(moved.c.id)
    if waits_for_flush:
        return moved_ids.add_cte(*parts)
    # The transaction's commit need not wait for its flush: ``set_config`` in a branch
    # that returns no row (it returns 'off'), evaluated once whatever the rows, so the
    # setting costs no round trip of its own.
    relaxed = select(null()).where(func.set_config("synchronous_commit", "off", True).is_(None))
    return union_all(moved_ids, relaxed).add_cte(*parts)


def _routed_parts(writes: Writes) -> list[tuple[Any, bool]]:
    """The parts of ``_statement`` as statements of their own for a distributed install
    (``routed.write_decisions``), each with whether it has rows: the inserts joined to
    their runs (``routed.anchored``), in foreign-key order; the outbox's part is
    ``outbox.publish``, before them."""
    return [
        (tasks.inserted_routed(), bool(writes.creates)),
        (timers.armed_routed(), bool(writes.timers)),
        (signals.consumed(), bool(writes.consumed)),
        (tasks.marked_observed(), bool(writes.observed)),
        (run_events.appended_routed(), bool(writes.events)),
        (runs.finished(), bool(writes.finishes)),
        (task_queue.enqueued_routed(), bool(writes.enqueues)),
    ]
