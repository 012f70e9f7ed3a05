"""``signals``: signals sent to a run, buffered until a wait consumes them (oldest first)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import JsonValue
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import BufferedSignal, ConsumeSignal
from legato.engine.repositories.params import in_array, uuid_array
from legato.schema import Signals


async def add(
    conn: AsyncConnection, run_id: uuid.UUID, signal_id: uuid.UUID, name: str, payload: JsonValue
) -> None:
    """Buffer a signal (Client.signal, Client.emit). Primary key, one partition."""
    await conn.execute(
        insert(Signals.table).values(run_id=run_id, id=signal_id, name=name, payload=payload)
    )


async def pending_many(
    conn: AsyncConnection, run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[BufferedSignal]]:
    """Each run's unconsumed signals, oldest first (decider snapshot). Served by the
    partial index ``ix_signals_pending``; ids are UUIDv7, so id order is time order."""
    result = await conn.execute(
        select(Signals.run_id, Signals.id, Signals.name, Signals.payload, Signals.created_at)
        .where(
            in_array(Signals.run_id, uuid_array("run_ids", run_ids)),
            Signals.consumed_at.is_(None),
        )
        .order_by(Signals.run_id, Signals.id)
    )
    grouped: dict[uuid.UUID, list[BufferedSignal]] = {run_id: [] for run_id in run_ids}
    for run_id, signal_id, name, payload, created_at in result:
        grouped[run_id].append(
            BufferedSignal(signal_id=signal_id, name=name, payload=payload, created_at=created_at)
        )
    return grouped


async def consume(
    conn: AsyncConnection, consumed: Sequence[tuple[uuid.UUID, ConsumeSignal]]
) -> None:
    """Mark signals consumed by the waits that took them (decider loop). One executemany
    round trip; primary keys."""
    if consumed:
        await conn.execute(
            update(Signals.table)
            .where(Signals.run_id == bindparam("b_run_id"), Signals.id == bindparam("b_id"))
            .values(consumed_at=func.now(), consumed_by=bindparam("b_task_id")),
            [
                {"b_run_id": run_id, "b_id": item.signal_id, "b_task_id": item.task_id}
                for run_id, item in consumed
            ],
        )
