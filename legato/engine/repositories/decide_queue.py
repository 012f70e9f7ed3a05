"""``decide_queue``: runs with something new to decide. Its primary key is the dedupe.

A row whose decisions keep failing carries its failure count (the back-off's exponent)
and last error; past the decider's bound it is quarantined: left out of the take (and
its index) until ``resume``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache

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

from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import in_array, uuid_array
from legato.schema import DecideQueue, Runs


async def enqueue(
    conn: AsyncConnection,
    run_ids: Iterable[uuid.UUID],
    reason: str,
    available_at: datetime | None = None,
) -> None:
    """Ask for a decision on each run (client start/signal/cancel, worker, timer, sweeper).

    Upserts in run-id order with ``ON CONFLICT DO UPDATE``, not ``DO NOTHING``: the
    update takes the row lock, so a report that races a decider evaluating the same
    run waits for it and re-inserts the row after — no lost wake-up. Ordered, so
    two batching writers never deadlock. A row backing off after a failed decision
    keeps its later ``available_at`` (new work does not undo the back-off), and a
    quarantined row stays quarantined. Served by the primary key.
    """
    ordered = sorted(set(run_ids))
    if ordered:
        await conn.execute(
            _enqueue_statement(),
            {"run_ids": ordered, "reason": reason, "available_at": available_at},
        )


@cache
def _enqueue_statement() -> Insert:
    rows = select(
        func.unnest(uuid_array("run_ids")).label("run_id"),
        bindparam("reason", type_=Text()).label("reason"),
        func.coalesce(bindparam("available_at", type_=DateTime(timezone=True)), func.now()).label(
            "available_at"
        ),
    ).order_by(literal_column("run_id"))
    statement = insert(DecideQueue.table).from_select(["run_id", "reason", "available_at"], rows)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[DecideQueue.run_id],
        set_={
            DecideQueue.reason: excluded.reason,
            DecideQueue.available_at: case(
                (DecideQueue.failures > 0, DecideQueue.available_at),
                else_=func.least(DecideQueue.available_at, excluded.available_at),
            ),
        },
    )


async def take(
    conn: AsyncConnection, limit: int, run_ids: Sequence[uuid.UUID] | None = None
) -> dict[uuid.UUID, int]:
    """Take up to ``limit`` runs due for a decision (or just ``run_ids``) off the queue
    (decider loop): run id -> decisions of it that failed so far, in run-id order.

    Deleted at once but locked until the decision commits: a report racing the
    decision waits on the deleted row and inserts a new one after the commit (or
    finds it restored by a rollback) — no lost wake-up, and no separate delete.
    ``FOR UPDATE SKIP LOCKED``: deciders never wait on each other. Quarantined rows
    are never taken. Served by the partial index ``ix_decide_queue_decider`` (or the
    primary key for ``run_ids``).
    """
    params: dict[str, object] = {"limit": limit}
    if run_ids is not None:
        params["run_ids"] = list(run_ids)
    result = await conn.execute(_take_statement(run_ids is not None), params)
    return dict(sorted(result.all()))


@cache
def _take_statement(chosen: bool) -> ReturningDelete[uuid.UUID, int]:
    due = select(DecideQueue.run_id).where(
        DecideQueue.available_at <= func.now(), DecideQueue.quarantined_at.is_(None)
    )
    if chosen:
        due = due.where(in_array(DecideQueue.run_id, uuid_array("run_ids")))
    taken = locked(
        due.order_by(DecideQueue.available_at).limit(bindparam("limit", type_=Integer())),
        "taken",
    )
    return (
        delete(DecideQueue.table)
        .where(DecideQueue.run_id == taken.c.run_id)
        .returning(DecideQueue.run_id, DecideQueue.failures)
    )


async def record_failure(
    conn: AsyncConnection,
    run_id: uuid.UUID,
    failures: int,
    error: str,
    retry_at: datetime | None,
) -> None:
    """Put back a run whose decision failed (decider loop, after ``take`` deleted its
    row): ``failures`` in a row so far, due again at ``retry_at``, or quarantined when
    ``retry_at`` is None. Primary key."""
    values = {
        "run_id": run_id,
        "reason": "decision failed",
        "failures": failures,
        "last_error": error,
        "available_at": retry_at or func.now(),
        "quarantined_at": func.now() if retry_at is None else None,
    }
    statement = insert(DecideQueue.table).values(values)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[DecideQueue.run_id],
            set_={k: statement.excluded[k] for k in values if k != "run_id"},
        )
    )


async def resume(conn: AsyncConnection, run_id: uuid.UUID) -> bool:
    """Make a quarantined run due again with a clean failure count (Client.resume,
    ``legato runs resume``); False when it was not quarantined. Primary key."""
    result = await conn.execute(
        update(DecideQueue.table)
        .where(DecideQueue.run_id == run_id, DecideQueue.quarantined_at.is_not(None))
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
    """Quarantined runs, most recently parked first (Client.list_quarantined, ``legato
    runs list --quarantined``). Served by ``ix_decide_queue_quarantined``, then the runs'
    primary keys."""
    rows = await conn.execute(
        select(
            DecideQueue.run_id,
            Runs.workflow_name,
            DecideQueue.failures,
            DecideQueue.quarantined_at,
            DecideQueue.last_error,
        )
        .join(Runs.table, Runs.id == DecideQueue.run_id)
        .where(DecideQueue.quarantined_at.is_not(None))
        .order_by(DecideQueue.quarantined_at.desc())
        .limit(limit)
    )
    return [QuarantinedRun(*row) for row in rows.all()]
