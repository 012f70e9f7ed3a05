"""``run_events``: a run's history, gap-free ``seq`` per run, appended only under the
run's row lock (by start or by the decider). An AFTER INSERT trigger NOTIFYs
``<schema>_events_v1`` for live tails (``notify.event_runs``), except for a run's first
event, which its start writes. No foreign key onto ``runs`` (migration 0016): every
row is written by a statement that inserted or locked its run. Every statement is
within the run's shard key (the parameter ``shard``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import Insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import routed
from legato.engine.repositories.params import Unnest, run_shard, shard_param
from legato.schema import RunEvents


@dataclass(frozen=True)
class HistoryEvent:
    seq: int
    type: str
    node_id: str | None
    iteration: int | None
    attempt: int | None
    data: JsonValue
    created_at: datetime


class NewEvent(NamedTuple):
    """A ``run_events`` row: event ``seq`` of a run's history."""

    run_id: uuid.UUID
    seq: int
    type: str
    node_id: str | None
    iteration: int | None
    attempt: int | None
    data: JsonValue


_NEW_EVENTS = Unnest("new_events", NewEvent, RunEvents)


@cache
def appended(spanning: bool = False) -> Insert:
    """Append events of runs of key ``:shard`` (``decisions.write``, bound by
    :func:`appended_params`): one INSERT over ``unnest`` of array parameters for a
    batch of runs, every row taking the one key (the NOTIFY trigger fires once, and
    sends nothing for no rows). The caller holds each run's row lock and numbers the
    events after the run's last seq, so seqs stay gap-free. Primary key (shard, run_id,
    seq); built once."""
    key = run_shard(_NEW_EVENTS.value("run_id")) if spanning else shard_param()
    return _NEW_EVENTS.insert(shard=key)


@cache
def appended_routed() -> Insert:
    """:func:`appended` on a distributed install (``routed.anchored``: the events joined to
    their runs of key ``:in_shard``, so Citus routes it to the key's node); a statement
    of ``decisions.write`` of its own there, bound by :func:`appended_params`."""
    return routed.anchored(_NEW_EVENTS)


def appended_params(shard: int, events: Sequence[NewEvent]) -> dict[str, Any]:
    return {**_NEW_EVENTS.bind(events), "in_shard": shard}


async def history(
    conn: AsyncConnection,
    shard: int,
    run_id: uuid.UUID,
    after_seq: int = 0,
    limit: int = 10_000,
) -> list[HistoryEvent]:
    """A run's events after ``after_seq`` (Client.get_run, ``legato runs watch``, which
    resumes by seq). Primary key (shard, run_id, seq), one partition."""
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
        .where(RunEvents.shard == shard, RunEvents.run_id == run_id, RunEvents.seq > after_seq)
        .order_by(RunEvents.seq)
        .limit(limit)
    )
    return [HistoryEvent(*row) for row in result]
