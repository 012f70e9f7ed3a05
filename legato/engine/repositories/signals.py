"""``signals``: signals sent to a run, buffered until a wait consumes them (oldest first).

Every statement is within one shard key: the run's (``Shards.of_run``), the scalar
parameter ``shard``; an emit to runs of several keys is one statement per key."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import (
    CTE,
    DateTime,
    Select,
    Text,
    Update,
    Uuid,
    bindparam,
    cast,
    func,
    insert,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import routed as routed_statements
from legato.engine.repositories.params import Unnest, in_array, run_shard, shard_param, uuid_array
from legato.engine.transport.driver import DriverStatements
from legato.schema import DecideQueue, Runs, RunStatus, Signals
from legato.schema.layout import routed, routed_engine
from legato.schema.types import JSON_VALUE


@cache
def _send_statement() -> Select[uuid.UUID]:
    return _delivered(
        select(Runs.id, cast(bindparam("payload", type_=Text()), JSONB).label("payload"))
        .where(
            Runs.shard == shard_param(),
            Runs.id == bindparam("run_id", type_=Uuid()),
            Runs.status == RunStatus.RUNNING,
        )
        .cte("target")
    )


def _delivered(target: CTE) -> Select[uuid.UUID]:
    """The signal named by the parameter ``name`` buffered for each (id, payload) row of
    ``target`` (RUNNING runs of key ``:shard``, in run-id order) and each run's decision
    asked for with the parameter ``reason``, due at once (``:now``, the sender's clock,
    a parameter rather than ``now()`` in the upsert); selects the ids of the runs it
    reached."""
    queued = pg_insert(DecideQueue.table).from_select(
        ["shard", "run_id", "reason"],
        select(shard_param(), target.c.id, bindparam("reason", type_=Text())).order_by(target.c.id),
    )
    queued = queued.on_conflict_do_update(
        index_elements=[DecideQueue.shard, DecideQueue.run_id],
        set_={
            DecideQueue.reason: queued.excluded.reason,
            DecideQueue.available_at: func.least(
                DecideQueue.available_at, bindparam("now", type_=DateTime(timezone=True))
            ),
        },
    )
    added = (
        insert(Signals.table)
        .from_select(
            ["shard", "run_id", "name", "payload"],
            select(shard_param(), target.c.id, bindparam("name", type_=Text()), target.c.payload),
        )
        .returning(Signals.run_id)
        .cte("added")
    )
    return select(added.c.run_id).add_cte(queued.cte("queued")).order_by(added.c.run_id)


async def send(
    conn: AsyncConnection,
    shard: int,
    run_id: uuid.UUID,
    name: str,
    payload: JsonValue,
) -> bool:
    """Buffer a signal for a RUNNING run and ask for its decision, in ONE statement
    (Client.signal); the decide_queue trigger NOTIFYs the deciders.
    Returns False, writing nothing, when the run is not running. Atomic on its own,
    so outside a transaction it is one round trip. Lock order holds: the decide row
    is the only lock it can wait on (no foreign-key check locks the run: migration
    0016). The signal's id is the
    column default, ``uuid7_v1()`` (``uuidv7()`` on PostgreSQL 18). Primary keys, led
    by the run's key ``shard``; built once."""
    params = _send_params(shard, run_id, name, payload)
    if routed(conn):
        return await routed_statements.send_signal(conn, params)
    result = await conn.execute(_send_statement(), params)
    return result.first() is not None


async def send_now(
    driver: DriverStatements, shard: int, run_id: uuid.UUID, name: str, payload: JsonValue
) -> bool:
    """``send`` committed on its own, on the asyncpg driver path
    (legato/engine/transport/driver.py): Client.signal, a step of the wake latency.
    Primary keys, led by the run's key ``shard``; built once."""
    params = _send_params(shard, run_id, name, payload)
    if routed_engine(driver.engine):  # two statements: in a transaction of their own
        async with driver.engine.begin() as conn:
            return await routed_statements.send_signal(conn, params)
    rows = await driver.execute(_send_statement(), params)
    return bool(rows)


def _send_params(shard: int, run_id: uuid.UUID, name: str, payload: JsonValue) -> dict[str, object]:
    return {
        "in_shard": shard,
        "now": datetime.now(UTC),
        "run_id": run_id,
        "name": name,
        "payload": JSON_VALUE.dump_text(payload),
        "reason": _reason(name),
    }


def _reason(name: str) -> str:
    return f"signal {name}"[:200]


class Delivery(NamedTuple):
    """One run's copy of an emitted signal: its payload as the run's workflow checked it."""

    run_id: uuid.UUID
    payload: JsonValue


_DELIVERIES = Unnest("delivery", Delivery, Signals)


async def send_many(
    conn: AsyncConnection, shard: int, name: str, deliveries: Sequence[Delivery]
) -> list[uuid.UUID]:
    """``send`` for many runs of key ``shard`` in ONE statement (Client.emit, one call
    per key): a ``name`` signal buffered for each delivery's run that is still RUNNING
    and its decision asked for, the decide rows upserted in run-id order (the lock
    order). Returns the ids of the runs reached, in order; the others get nothing.
    Primary keys (shard, id) of the runs' partitions (pruned by the ``run_ids`` array);
    built once."""
    if not deliveries:
        return []
    params = {
        "in_shard": shard,
        "now": datetime.now(UTC),
        **_DELIVERIES.bind(deliveries),
        "run_ids": [delivery.run_id for delivery in deliveries],
        "name": name,
        "reason": _reason(name),
    }
    result = await conn.execute(_send_many_statement(), params)
    return list(result.scalars())


@cache
def _send_many_statement() -> Select[uuid.UUID]:
    sent = _DELIVERIES.alias
    return _delivered(
        select(Runs.id, _DELIVERIES.value("payload").label("payload"))
        .join_from(sent, Runs.table, Runs.id == sent.c.run_id)
        .where(
            Runs.shard == shard_param(),
            in_array(Runs.id, uuid_array("run_ids")),
            Runs.status == RunStatus.RUNNING,
        )
        .cte("target")
    )


@dataclass(frozen=True)
class PendingSignal:
    """An unconsumed ``signals`` row."""

    signal_id: uuid.UUID
    name: str
    payload: JsonValue
    created_at: datetime


class Consumption(NamedTuple):
    """A signal taken by the wait ``consumed_by`` (a task id)."""

    run_id: uuid.UUID
    id: uuid.UUID
    consumed_by: uuid.UUID


_CONSUMED = Unnest("consumed", Consumption, Signals)


@cache
def consumed(spanning: bool = False) -> Update:
    """Mark signals of key ``:shard`` consumed by the waits that took them
    (``decisions.write``, bound by :func:`consumed_params`). One UPDATE joined to
    ``unnest`` of array parameters for the batch, built once; primary keys (shard,
    run_id, id) of the runs' partitions."""
    return _CONSUMED.update(
        Signals.shard == (run_shard(_CONSUMED.value("run_id")) if spanning else shard_param()),
        in_array(Signals.run_id, uuid_array("consumed_run_ids")),
        Signals.run_id == _CONSUMED.value("run_id"),
        Signals.id == _CONSUMED.value("id"),
        keys=("run_id", "id"),
        consumed_at=func.now(),
    )


def consumed_params(shard: int, consumptions: Sequence[Consumption]) -> dict[str, Any]:
    return {
        "in_shard": shard,
        **_CONSUMED.bind(consumptions),
        "consumed_run_ids": sorted({c.run_id for c in consumptions}),
    }
