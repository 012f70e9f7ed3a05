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


async def claim(conn: AsyncConnection, limit: int) -> list[uuid.UUID]:
    """Lock up to ``limit`` runs that are due for a decision (decider loop).

    ``FOR UPDATE SKIP LOCKED``: deciders never wait on each other; the row lock is
    held until the decision commits. Served by ``ix_decide_queue_available_at``.
    """
    result = await conn.execute(
        select(DecideQueue.run_id)
        .where(DecideQueue.available_at <= func.now())
        .order_by(DecideQueue.available_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list(result.scalars())


async def remove(conn: AsyncConnection, run_ids: Sequence[uuid.UUID]) -> None:
    """Delete the decided runs' rows (decider loop, same transaction as the decision)."""
    if run_ids:
        await conn.execute(
            delete(DecideQueue.table).where(
                in_array(DecideQueue.run_id, uuid_array("run_ids", run_ids))
            )
        )


async def postpone(conn: AsyncConnection, run_id: uuid.UUID, until: datetime, reason: str) -> None:
    """Push a run whose decision failed back by a delay (decider loop), so it is retried
    without spinning. Served by the primary key."""
    await conn.execute(
        DecideQueue.table.update()
        .where(DecideQueue.run_id == run_id)
        .values(available_at=until, reason=reason)
    )


async def count(conn: AsyncConnection) -> int:
    """Runs waiting for a decision (``legato runs`` status lines, tests)."""
    return int(
        (await conn.execute(select(func.count()).select_from(DecideQueue.table))).scalar_one()
    )
