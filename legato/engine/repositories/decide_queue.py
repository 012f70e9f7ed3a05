"""``decide_queue``: runs with something new to decide. Its primary key is the dedupe."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import DateTime, Text, delete, func, literal, literal_column, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import in_array, uuid_array
from legato.schema import DecideQueue


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
    two batching writers never deadlock. Served by the primary key.
    """
    ordered = sorted(set(run_ids))
    if not ordered:
        return
    rows = select(
        func.unnest(uuid_array("run_ids", ordered)).label("run_id"),
        literal(reason, Text()).label("reason"),
        func.coalesce(literal(available_at, DateTime(timezone=True)), func.now()).label(
            "available_at"
        ),
    ).order_by(literal_column("run_id"))
    statement = insert(DecideQueue.table).from_select(["run_id", "reason", "available_at"], rows)
    excluded = statement.excluded
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[DecideQueue.run_id],
            set_={
                DecideQueue.reason: excluded.reason,
                DecideQueue.available_at: func.least(
                    DecideQueue.available_at, excluded.available_at
                ),
            },
        )
    )


async def take(
    conn: AsyncConnection, limit: int, run_ids: Sequence[uuid.UUID] | None = None
) -> list[uuid.UUID]:
    """Take up to ``limit`` runs due for a decision (or just ``run_ids``) off the queue
    (decider loop).

    Deleted at once but locked until the decision commits: a report racing the
    decision waits on the deleted row and inserts a new one after the commit (or
    finds it restored by a rollback) — no lost wake-up, and no separate delete.
    ``FOR UPDATE SKIP LOCKED``: deciders never wait on each other. Served by
    ``ix_decide_queue_available_at`` (or the primary key for ``run_ids``).
    """
    due = select(DecideQueue.run_id).where(DecideQueue.available_at <= func.now())
    if run_ids is not None:
        due = due.where(in_array(DecideQueue.run_id, uuid_array("run_ids", run_ids)))
    due = due.order_by(DecideQueue.available_at).limit(limit).with_for_update(skip_locked=True)
    result = await conn.execute(
        delete(DecideQueue.table)
        .where(DecideQueue.run_id.in_(due.scalar_subquery()))
        .returning(DecideQueue.run_id)
    )
    return sorted(result.scalars())


async def postpone(conn: AsyncConnection, run_id: uuid.UUID, until: datetime, reason: str) -> None:
    """Put a run whose decision failed back on the queue after a delay (decider loop), so
    it is retried without spinning. Primary key."""
    await enqueue(conn, [run_id], reason, available_at=until)
