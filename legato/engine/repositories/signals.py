"""``signals``: signals sent to a run, buffered until a wait consumes them (oldest first)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import JsonValue
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import BufferedSignal, ConsumeSignal
from legato.schema import Signals


async def add(
    conn: AsyncConnection, run_id: uuid.UUID, signal_id: uuid.UUID, name: str, payload: JsonValue
) -> None:
    """Buffer a signal (Client.signal, Client.emit). Primary key, one partition."""
    await conn.execute(
        insert(Signals.table).values(run_id=run_id, id=signal_id, name=name, payload=payload)
    )


async def pending(conn: AsyncConnection, run_id: uuid.UUID) -> list[BufferedSignal]:
    """A run's unconsumed signals, oldest first (decider snapshot). Served by the
    partial index ``ix_signals_pending``; ids are UUIDv7, so id order is time order."""
    result = await conn.execute(
        select(Signals.id, Signals.name, Signals.payload, Signals.created_at)
        .where(Signals.run_id == run_id, Signals.consumed_at.is_(None))
        .order_by(Signals.id)
    )
    return [
        BufferedSignal(signal_id=signal_id, name=name, payload=payload, created_at=created_at)
        for signal_id, name, payload, created_at in result
    ]


async def consume(
    conn: AsyncConnection, run_id: uuid.UUID, consumed: Sequence[ConsumeSignal]
) -> None:
    """Mark signals consumed by the waits that took them (decider loop). Primary key."""
    for item in consumed:
        await conn.execute(
            update(Signals.table)
            .where(Signals.run_id == run_id, Signals.id == item.signal_id)
            .values(consumed_at=func.now(), consumed_by=item.task_id)
        )
