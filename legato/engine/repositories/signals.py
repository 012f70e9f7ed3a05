"""``signals``: signals sent to a run, buffered until a wait consumes them (oldest first)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Text, Uuid, bindparam, cast, func, insert, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import BufferedSignal, ConsumeSignal
from legato.engine.repositories.params import in_array, uuid_array
from legato.schema import DecideQueue, Runs, RunStatus, Signals
from legato.schema.types import JSON_VALUE


@cache
def _send_statement() -> Any:
    target = (
        select(Runs.id)
        .where(Runs.id == bindparam("run_id", type_=Uuid()), Runs.status == RunStatus.RUNNING)
        .cte("target")
    )
    queued = pg_insert(DecideQueue.table).from_select(
        ["run_id", "reason"], select(target.c.id, bindparam("reason", type_=Text()))
    )
    queued = queued.on_conflict_do_update(
        index_elements=[DecideQueue.run_id],
        set_={
            DecideQueue.reason: queued.excluded.reason,
            DecideQueue.available_at: func.least(DecideQueue.available_at, func.now()),
        },
    )
    added = (
        insert(Signals.table)
        .from_select(
            ["run_id", "name", "payload"],
            select(
                target.c.id,
                bindparam("name", type_=Text()),
                cast(bindparam("payload", type_=Text()), JSONB),
            ),
        )
        .returning(Signals.run_id)
        .cte("added")
    )
    return select(added.c.run_id).add_cte(queued.cte("queued"))


async def send(
    conn: AsyncConnection,
    run_id: uuid.UUID,
    name: str,
    payload: JsonValue,
) -> bool:
    """Buffer a signal for a RUNNING run and ask for its decision, in ONE statement
    (Client.signal, Client.emit); the decide_queue trigger NOTIFYs the deciders.
    Returns False, writing nothing, when the run is not running. Atomic on its own,
    so outside a transaction it is one round trip. Lock order holds: the decide row
    is the only lock it can wait on (the foreign-key check of the signal takes KEY
    SHARE, which a decider's NO KEY UPDATE lets through). The signal's id is the
    column default, ``uuid7_v1()`` (``uuidv7()`` on PostgreSQL 18). Primary keys;
    built once."""
    result = await conn.execute(
        _send_statement(),
        {
            "run_id": run_id,
            "name": name,
            "payload": JSON_VALUE.dump_text(payload),
            "reason": f"signal {name}"[:200],
        },
    )
    return result.first() is not None


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
