"""``signals``: signals sent to a run, buffered until a wait consumes them (oldest first)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import Select, Text, Update, Uuid, bindparam, cast, func, insert, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.driver import DriverStatements
from legato.engine.repositories.params import Unnest, in_array, uuid_array
from legato.schema import DecideQueue, Runs, RunStatus, Signals
from legato.schema.types import JSON_VALUE


@cache
def _send_statement() -> Select[uuid.UUID]:
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
    result = await conn.execute(_send_statement(), _send_params(run_id, name, payload))
    return result.first() is not None


async def send_now(
    driver: DriverStatements, run_id: uuid.UUID, name: str, payload: JsonValue
) -> bool:
    """``send`` committed on its own, on the asyncpg driver path (legato/engine/driver.py):
    Client.signal, a step of the wake latency. Primary keys; built once."""
    rows = await driver.execute(_send_statement(), _send_params(run_id, name, payload))
    return bool(rows)


def _send_params(run_id: uuid.UUID, name: str, payload: JsonValue) -> dict[str, object]:
    return {
        "run_id": run_id,
        "name": name,
        "payload": JSON_VALUE.dump_text(payload),
        "reason": f"signal {name}"[:200],
    }


@dataclass(frozen=True)
class PendingSignal:
    """An unconsumed ``signals`` row."""

    signal_id: uuid.UUID
    name: str
    payload: JsonValue
    created_at: datetime


async def pending_many(
    conn: AsyncConnection, run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[PendingSignal]]:
    """Each run's unconsumed signals, oldest first (Client.emit; the decider reads them
    with its tasks, ``tasks.snapshots``). Served by the partial index
    ``ix_signals_pending``; ids are UUIDv7, so id order is time order. Built once."""
    result = await conn.execute(_pending_statement(), {"run_ids": list(run_ids)})
    grouped: dict[uuid.UUID, list[PendingSignal]] = {run_id: [] for run_id in run_ids}
    for row in result:
        grouped[row[0]].append(PendingSignal(*row[1:]))
    return grouped


@cache
def _pending_statement() -> Select[uuid.UUID, uuid.UUID, str, JsonValue, datetime]:
    return (
        select(Signals.run_id, Signals.id, Signals.name, Signals.payload, Signals.created_at)
        .where(in_array(Signals.run_id, uuid_array("run_ids")), Signals.consumed_at.is_(None))
        .order_by(Signals.run_id, Signals.id)
    )


class Consumption(NamedTuple):
    """A signal taken by the wait ``consumed_by`` (a task id)."""

    run_id: uuid.UUID
    id: uuid.UUID
    consumed_by: uuid.UUID


_CONSUMED = Unnest("consumed", Consumption, Signals)


@cache
def consumed() -> Update:
    """Mark signals consumed by the waits that took them (``decisions.write``, bound by
    :func:`consumed_params`). One UPDATE joined to ``unnest`` of array parameters for
    the batch, built once; primary keys of the runs' partitions."""
    return _CONSUMED.update(
        in_array(Signals.run_id, uuid_array("consumed_run_ids")),
        Signals.run_id == _CONSUMED.value("run_id"),
        Signals.id == _CONSUMED.value("id"),
        keys=("run_id", "id"),
        consumed_at=func.now(),
    )


def consumed_params(consumptions: Sequence[Consumption]) -> dict[str, Any]:
    return {
        **_CONSUMED.bind(consumptions),
        "consumed_run_ids": sorted({c.run_id for c in consumptions}),
    }
