"""``decide_queue``: runs with something new to decide. Its primary key is the dedupe."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import DateTime, Integer, Text, bindparam, delete, func, literal_column, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.claims import locked
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
    if ordered:
        await conn.execute(
            _enqueue_statement(),
            {"run_ids": ordered, "reason": reason, "available_at": available_at},
        )


@cache
def _enqueue_statement() -> Any:
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
            DecideQueue.available_at: func.least(DecideQueue.available_at, excluded.available_at),
        },
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
    params: dict[str, object] = {"limit": limit}
    if run_ids is not None:
        params["run_ids"] = list(run_ids)
    result = await conn.execute(_take_statement(run_ids is not None), params)
    return sorted(result.scalars())


@cache
def _take_statement(chosen: bool) -> Any:
    due = select(DecideQueue.run_id).where(DecideQueue.available_at <= func.now())
    if chosen:
        due = due.where(in_array(DecideQueue.run_id, uuid_array("run_ids")))
    taken = locked(
        due.order_by(DecideQueue.available_at).limit(bindparam("limit", type_=Integer())),
        "taken",
    )
    return (
        delete(DecideQueue.table)
        .where(DecideQueue.run_id == taken.c.run_id)
        .returning(DecideQueue.run_id)
    )


async def postpone(conn: AsyncConnection, run_id: uuid.UUID, until: datetime, reason: str) -> None:
    """Put a run whose decision failed back on the queue after a delay (decider loop), so
    it is retried without spinning. Primary key."""
    await enqueue(conn, [run_id], reason, available_at=until)
