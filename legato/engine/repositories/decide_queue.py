"""``decide_queue``: runs with something new to decide. Its primary key is the dedupe.

A row whose decisions keep failing carries its failure count (the back-off's exponent)
and last error; past the decider's bound it is quarantined: left out of the take (and
its index) until ``resume``. Every statement but the quarantine listing is within one
shard key (the parameter ``shard``); the decider takes one key at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    DateTime,
    Integer,
    Text,
    bindparam,
    case,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningDelete

from legato.engine.repositories import routed as routed_statements
from legato.engine.repositories.claims import locked
from legato.engine.repositories.notify import decide_channel
from legato.engine.repositories.params import (
    SHARD_COUNT_PARAM,
    SHARD_PARAM,
    fan_out,
    from_floor,
    in_array,
    run_shard,
    shard_param,
    shards_param,
    spanning_params,
    uuid_array,
)
from legato.engine.repositories.precompiled import execute_in
from legato.schema import DecideQueue, Runs
from legato.schema.layout import routed


async def enqueue(
    conn: AsyncConnection,
    shard: int,
    run_ids: Iterable[uuid.UUID],
    reason: str,
    available_at: datetime | None = None,
) -> None:
    """Ask for a decision on each run of key ``shard`` (client start/signal/cancel,
    worker, timer, sweeper, decider for child runs).

    Upserts in run-id order with ``ON CONFLICT DO UPDATE``, not ``DO NOTHING``: the
    update takes the row lock, so a report that races a decider evaluating the same
    run waits for it and re-inserts the row after — no lost wake-up. Ordered, so
    two batching writers never deadlock. A row backing off after a failed decision
    keeps its later ``available_at`` (new work does not undo the back-off), and a
    quarantined row stays quarantined. Without ``available_at`` a new row is due at the
    column's default (the server's ``now()``), which the upsert reads back as
    ``excluded.available_at``: no ``now()`` inside the conflict's SET. Every run id
    lies in ``shard``; a batch spanning keys is one call per key. Served by the
    primary key (shard, run_id).
    """
    ordered = sorted(set(run_ids))
    if ordered:
        params: dict[str, object] = {SHARD_PARAM: shard, "run_ids": ordered, "reason": reason}
        if available_at is not None:
            params["available_at"] = available_at
        timed = available_at is not None
        if routed(conn):
            await conn.execute(routed_statements.enqueue_statement(timed), params)
            await routed_statements.wake(conn, decide_channel, [str(shard)])
        else:
            await execute_in(conn, _enqueue_statement(timed, False), params)


async def enqueue_held(
    conn: AsyncConnection,
    count: int,
    run_ids: Iterable[uuid.UUID],
    reason: str,
    available_at: datetime | None = None,
) -> None:
    """:func:`enqueue` of runs of any key in ONE statement (report flushes of a
    single-node installation; ``count`` is the installation's key count): each row
    takes its run's key, computed from its id (``params.run_shard``), and the rows go in
    (key, run id) order — the order per-key upserts in ascending keys take, so the
    lock order is the same in both layouts. Primary key (shard, run_id)."""
    params = enqueued_held_params(count, run_ids, reason)
    if params["run_ids"]:
        if available_at is not None:
            params["available_at"] = available_at
        await execute_in(conn, enqueued_held(available_at is not None), params)


def enqueued_held(timed: bool = False) -> Insert:
    """:func:`enqueue_held`'s upsert (also the first part of ``report_write``'s statement),
    bound by :func:`enqueued_held_params`; with ``timed``, also ``available_at``."""
    return _enqueue_statement(timed, True)


def enqueued_held_params(count: int, run_ids: Iterable[uuid.UUID], reason: str) -> dict[str, Any]:
    """The parameters of :func:`enqueued_held`: the runs in id order, each once."""
    return {SHARD_COUNT_PARAM: count, "run_ids": sorted(set(run_ids)), "reason": reason}


@cache
def _enqueue_statement(timed: bool, spanning: bool) -> Insert:
    columns = ["shard", "run_id", "reason"]
    given = func.unnest(uuid_array("run_ids")).table_valued("run_id").render_derived("given")
    run_id = given.c.run_id
    values: list[Any] = [
        (run_shard(run_id) if spanning else shard_param()).label("shard"),
        run_id.label("run_id"),
        bindparam("reason", type_=Text()).label("reason"),
    ]
    if timed:
        columns.append("available_at")
        values.append(
            bindparam("available_at", type_=DateTime(timezone=True)).label("available_at")
        )
    rows = select(*values).select_from(given).order_by(
        literal_column("shard"), literal_column("run_id")
    )
    statement = insert(DecideQueue.table).from_select(columns, rows)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[DecideQueue.shard, DecideQueue.run_id],
        set_={
            DecideQueue.reason: excluded.reason,
            DecideQueue.available_at: case(
                # A literal: Citus loses a parameter's type inside this ON CONFLICT.
                (DecideQueue.failures > literal_column("0"), DecideQueue.available_at),
                else_=func.least(DecideQueue.available_at, excluded.available_at),
            ),
        },
    )


@dataclass(frozen=True)
class QueueTake:
    """What a take of decide rows returned: run id -> decisions of it that failed so
    far, in run-id order, and the oldest ``available_at`` among the rows (None when it
    took none): where the decider's next takes of the key may start."""

    failures: dict[uuid.UUID, int]
    oldest: datetime | None


async def take(
    conn: AsyncConnection,
    shard: int,
    limit: int,
    run_ids: Sequence[uuid.UUID] | None = None,
    since: datetime | None = None,
) -> QueueTake:
    """Take up to ``limit`` runs of key ``shard`` due for a decision (or just
    ``run_ids``, all of that key) off the queue (decider loop of a distributed
    installation, one take per dirty key), from ``since`` on when it is given (the
    decider's floor for the key, docs/design.md "The decider's floor").

    Deleted at once but locked until the decision commits: a report racing the
    decision waits on the deleted row and inserts a new one after the commit (or
    finds it restored by a rollback) — no lost wake-up, and no separate delete.
    ``FOR UPDATE SKIP LOCKED``: deciders never wait on each other. Quarantined rows
    are never taken. Served by the partial index ``ix_decide_queue_decider`` (shard,
    available_at), its range starting at ``since`` (or the primary key (shard, run_id)
    for ``run_ids``).
    """
    params: dict[str, object] = {SHARD_PARAM: shard, "limit": limit, "since": since}
    if run_ids is not None:
        params["run_ids"] = list(run_ids)
    result = await conn.execute(_take_statement(run_ids is not None, False), params)
    return _queue_take(result.all())


async def take_held(
    conn: AsyncConnection,
    keys: Sequence[int],
    count: int,
    limit: int,
    run_ids: Sequence[uuid.UUID] | None = None,
) -> QueueTake:
    """:func:`take` over every key in ``keys`` in ONE statement (decider loop of a
    single-node installation, a batch retried run by run; ``count`` is the
    installation's key count): the oldest due runs of any of those keys, as the one
    queue before there were keys — fair between keys by age. The same locks and
    deletion as :func:`take`; ``ix_decide_queue_decider`` (shard, available_at), one
    range per key (``shard = ANY``), or the primary key for ``run_ids``."""
    params: dict[str, object] = {
        **spanning_params(keys, count),
        "limit": limit,
        "since": None,
    }
    if run_ids is not None:
        params["run_ids"] = list(run_ids)
    result = await conn.execute(_take_statement(run_ids is not None, True), params)
    return _queue_take(result.all())


def _queue_take(rows: Sequence[Any]) -> QueueTake:
    return QueueTake(
        failures=dict(sorted((run_id, failures) for run_id, failures, _ in rows)),
        oldest=min((available_at for _, _, available_at in rows), default=None),
    )


@cache
def _take_statement(chosen: bool, spanning: bool) -> ReturningDelete[uuid.UUID, int, datetime]:
    key = in_array(DecideQueue.shard, shards_param()) if spanning else (
        DecideQueue.shard == shard_param()
    )
    due = select(DecideQueue.shard, DecideQueue.run_id).where(
        key,
        DecideQueue.available_at >= from_floor(),
        DecideQueue.available_at <= func.now(),
        DecideQueue.quarantined_at.is_(None),
    )
    if chosen:
        due = due.where(in_array(DecideQueue.run_id, uuid_array("run_ids")))
    taken = locked(
        due.order_by(DecideQueue.available_at).limit(bindparam("limit", type_=Integer())),
        "taken",
    )
    return (
        delete(DecideQueue.table)
        .where(
            DecideQueue.shard == (taken.c.shard if spanning else shard_param()),
            DecideQueue.run_id == taken.c.run_id,
        )
        .returning(DecideQueue.run_id, DecideQueue.failures, DecideQueue.available_at)
    )


async def record_failure(
    conn: AsyncConnection,
    shard: int,
    run_id: uuid.UUID,
    failures: int,
    error: str,
    retry_at: datetime | None,
    now: datetime | None = None,
) -> None:
    """Put back a run whose decision failed (decider loop, after ``take`` deleted its
    row): ``failures`` in a row so far, due again at ``retry_at``, or quarantined at
    ``now`` (the caller's clock by default) when ``retry_at`` is None. Primary key
    (shard, run_id)."""
    at = now or datetime.now(UTC)
    values = {
        "shard": shard,
        "run_id": run_id,
        "reason": "decision failed",
        "failures": failures,
        "last_error": error,
        "available_at": retry_at or at,
        "quarantined_at": at if retry_at is None else None,
    }
    statement = insert(DecideQueue.table).values(values)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[DecideQueue.shard, DecideQueue.run_id],
            set_={k: statement.excluded[k] for k in values if k not in ("shard", "run_id")},
        )
    )


async def resume(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> bool:
    """Make a quarantined run of key ``shard`` due again with a clean failure count
    (Client.resume, ``legato runs resume``); False when it was not quarantined.
    Primary key (shard, run_id)."""
    result = await conn.execute(
        update(DecideQueue.table)
        .where(
            DecideQueue.shard == shard,
            DecideQueue.run_id == run_id,
            DecideQueue.quarantined_at.is_not(None),
        )
        .values(
            quarantined_at=None,
            failures=0,
            last_error=None,
            available_at=func.now(),
            reason="resumed",
        )
        .returning(DecideQueue.run_id)
    )
    return result.first() is not None


@dataclass(frozen=True)
class QuarantinedRun:
    """A run parked after its decisions failed too often, with the last error."""

    run_id: uuid.UUID
    workflow_name: str
    failures: int
    quarantined_at: datetime
    last_error: str | None


async def quarantined(conn: AsyncConnection, limit: int) -> list[QuarantinedRun]:
    """Fan-out across shard keys: quarantined runs of every key, most recently parked
    first (Client.list_quarantined, ``legato runs list --quarantined``; never on a hot
    path). Served by ``ix_decide_queue_quarantined``, then the runs' primary keys
    (shard, id), joined within each row's key."""
    rows = await conn.execute(
        fan_out(
            select(
                DecideQueue.run_id,
                Runs.workflow_name,
                DecideQueue.failures,
                DecideQueue.quarantined_at,
                DecideQueue.last_error,
            )
            .join(Runs.table, (Runs.shard == DecideQueue.shard) & (Runs.id == DecideQueue.run_id))
            .where(DecideQueue.quarantined_at.is_not(None))
            .order_by(DecideQueue.quarantined_at.desc())
            .limit(limit)
        )
    )
    return [QuarantinedRun(*row) for row in rows.all()]
