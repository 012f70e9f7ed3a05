"""A single-node decider's take, lock and read of a batch in ONE round trip:
``decider_take_v2`` (migration 0021: 0019's v1, its taken rows deleted through the
primary key by arrays), the three statements the decider otherwise sends one by one
(``decide_queue.take_held``, ``runs.lock_many_held``, ``tasks.snapshots_held``), run by
the server in that order, each in a snapshot taken after the one before it.

The distributed layout keeps the three statements (each within the one key Citus
routes it by), and so does a batch retried run by run (``decide_queue.take`` of chosen
runs).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, SmallInteger, bindparam, column, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.selectable import TextualSelect

from legato.engine.repositories import runs, tasks
from legato.engine.repositories.partitions import schema_name
from legato.engine.repositories.signals import PendingSignal
from legato.schema import RunStatus, Tasks

Snapshots = dict[uuid.UUID, tuple[list[tasks.TaskRow], list[PendingSignal]]]


@dataclass
class Taken:
    """A batch of runs taken off the decide queue, locked, with what the decider reads.

    ``failures``: each taken run's failed decisions so far (the decide row's count);
    ``locked``: the runs' rows in id order with each one's last history seq;
    ``loaded``: the attempts and unconsumed signals of the RUNNING ones;
    ``oldest``: the oldest ``available_at`` among the taken rows (the single-node take's;
    None otherwise)."""

    failures: dict[uuid.UUID, int] = field(default_factory=dict)
    locked: list[tuple[runs.RunRow, int]] = field(default_factory=list)
    loaded: Snapshots = field(default_factory=dict)
    oldest: datetime | None = None


async def take_and_load(
    conn: AsyncConnection, keys: Sequence[int], limit: int, since: datetime | None = None
) -> Taken:
    """Take up to ``limit`` due runs of any of ``keys`` (those due from ``since`` on, when
    given: the decider's floor), lock them and read them, in the caller's transaction
    (decider loop of a single-node installation, one call per tick). The take by
    ``ix_decide_queue_decider`` (shard, available_at), one range per key starting at
    ``since``; the rest by the runs', ``run_events``', ``tasks``' and ``signals``'
    primary keys and ``ix_signals_pending``, in the taken runs' keys."""
    params = {"keys": sorted(keys), "lim": limit, "since": since}
    result = await conn.execute(_statement(schema_name(conn)), params)
    taken = Taken()
    snapshot_rows: list[Any] = []
    for row in result:
        if row[0] == 0:
            run = runs.run_row(row[1:_LAST_SEQ])
            taken.locked.append((run, row[_LAST_SEQ]))
            taken.failures[run.id] = row[_LAST_SEQ + 1]
            taken.oldest = row[_LAST_SEQ + 2]
        else:
            snapshot_rows.append(row[_SNAPSHOT:])
    running = [run.id for run, _ in taken.locked if run.status is RunStatus.RUNNING]
    taken.loaded = tasks.grouped(running, snapshot_rows)
    return taken


# Positions in the function's rows: part, the run's columns, its last seq, its failures,
# the oldest available_at taken, then the snapshot's (``tasks.grouped``'s run_id, which,
# then TASK_ROW_COLUMNS).
_LAST_SEQ = 1 + len(runs.RUN_COLUMNS)
_SNAPSHOT = _LAST_SEQ + 3
# The attempt's columns named like a run's carry a prefix in the function's result.
_SHARED = frozenset({"id", "output", "error", "created_at", "finished_at"})


@cache
def _statement(schema: str) -> TextualSelect:
    """The call in ``schema`` (validated by ``schema_name``), built once per schema; its
    columns typed as the tables' so the rows decode as the three statements' do."""
    run_part = [column(c.key, c.type) for c in runs.RUN_COLUMNS]
    snapshot_part: list[ColumnClause[Any]] = [
        column("task_run_id", Tasks.run_id.type),
        column("which", Integer()),
        *(
            column(f"task_{c.key}" if c.key in _SHARED else c.key, c.type)
            for c in tasks.TASK_ROW_COLUMNS
        ),
    ]
    call = text(f'SELECT * FROM "{schema}".decider_take_v2(:keys, :lim, :since)').bindparams(
        bindparam("keys", type_=ARRAY(SmallInteger())),
        bindparam("lim", type_=Integer()),
        bindparam("since", type_=DateTime(timezone=True)),
    )
    return call.columns(
        column("part", SmallInteger()),
        *run_part,
        column("last_seq", BigInteger()),
        column("failures", Integer()),
        column("taken_from", DateTime(timezone=True)),
        *snapshot_part,
    )
