"""``run_events``: a run's history, gap-free ``seq`` per run, appended only under the
run's row lock (by start or by the decider). An AFTER INSERT trigger NOTIFYs
``<schema>_events_v1`` with ``<run_id>:<seq>`` for live tails."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import cast, insert, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import AppendEvent
from legato.engine.repositories.params import int_array, rows_of, text_array, uuid_array
from legato.schema import RunEvents
from legato.schema.types import JSON_VALUE


@dataclass(frozen=True)
class HistoryEvent:
    seq: int
    type: str
    node_id: str | None
    iteration: int | None
    attempt: int | None
    data: JsonValue
    created_at: datetime


async def append(
    conn: AsyncConnection, events: Sequence[tuple[uuid.UUID, int, AppendEvent]]
) -> None:
    """Append events ``(run_id, seq, event)`` (decider loop): one INSERT over ``unnest``
    of array parameters for a batch of runs, so the server runs one statement (and
    the NOTIFY trigger fires once). The caller holds each run's row lock and numbers
    the events after the run's last seq, so seqs stay gap-free. Primary key; built
    once."""
    if not events:
        return
    await conn.execute(
        _append_statement(),
        {
            "run_ids": [run_id for run_id, _, _ in events],
            "seqs": [seq for _, seq, _ in events],
            "types": [event.type for _, _, event in events],
            "node_ids": [event.node_id for _, _, event in events],
            "iterations": [event.iteration for _, _, event in events],
            "attempts": [event.attempt for _, _, event in events],
            "datas": [JSON_VALUE.dump_text(event.data) for _, _, event in events],
        },
    )


@cache
def _append_statement() -> Any:
    given = rows_of(
        "given",
        run_id=uuid_array("run_ids"),
        seq=int_array("seqs"),
        type=text_array("types"),
        node_id=text_array("node_ids"),
        iteration=int_array("iterations"),
        attempt=int_array("attempts"),
        data=text_array("datas"),
    )
    return insert(RunEvents.table).from_select(
        ["run_id", "seq", "type", "node_id", "iteration", "attempt", "data"],
        select(
            given.c.run_id,
            given.c.seq,
            given.c.type,
            given.c.node_id,
            given.c.iteration,
            given.c.attempt,
            cast(given.c.data, JSONB),
        ),
    )


async def history(
    conn: AsyncConnection, run_id: uuid.UUID, after_seq: int = 0, limit: int = 10_000
) -> list[HistoryEvent]:
    """A run's events after ``after_seq`` (Client.get_run, ``legato runs watch``, which
    resumes by seq). Primary key, one partition."""
    result = await conn.execute(
        select(
            RunEvents.seq,
            RunEvents.type,
            RunEvents.node_id,
            RunEvents.iteration,
            RunEvents.attempt,
            RunEvents.data,
            RunEvents.created_at,
        )
        .where(RunEvents.run_id == run_id, RunEvents.seq > after_seq)
        .order_by(RunEvents.seq)
        .limit(limit)
    )
    return [HistoryEvent(*row) for row in result]
