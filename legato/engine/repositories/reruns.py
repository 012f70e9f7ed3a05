"""``runs.rerun_of``: the link between a run and its reruns (migration 0012).

A rerun's id is made in its original's shard key, so every statement here is of one
key (the parameter ``shard``): the original, its reruns and the rerun's rows alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import JsonValue
from sqlalchemy import func, insert, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import run_events, tasks
from legato.engine.repositories.runs import RunRow
from legato.engine.repositories.runs import lock_many as lock_runs
from legato.schema import Runs, RunStatus


@dataclass(frozen=True)
class NewRerun:
    """The ``runs`` row of a rerun (RUNNING), of the original's key."""

    run_id: uuid.UUID
    rerun_of: uuid.UUID
    workflow_name: str
    workflow_version: int
    input: JsonValue


async def lock_original(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> RunRow | None:
    """Lock the run to rerun for the rest of the transaction (Client.rerun and the bulk
    rerun), so two reruns of one run, and a rerun racing the run's last decision,
    happen one after the other. ``runs.lock_many``'s statement: primary key (shard, id)."""
    locked = await lock_runs(conn, shard, [run_id])
    return locked[0][0] if locked else None


async def links(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID
) -> tuple[uuid.UUID | None, tuple[uuid.UUID, ...]]:
    """The run ``run_id`` reruns (None if it is no rerun) and its own reruns, oldest
    first (Client.get_run, ``runs show``, the dashboard's run page, Client.rerun).
    One statement: the primary key (shard, id) for the first, ``ix_runs_rerun_of``
    (shard, rerun_of) for the second."""
    reruns = Runs.table.alias("reruns")
    later = (
        select(func.array_agg(aggregate_order_by(reruns.c.id, reruns.c.id)))
        .where(reruns.c.shard == shard, reruns.c.rerun_of == run_id)
        .scalar_subquery()
    )
    row = (
        await conn.execute(
            select(Runs.rerun_of, later).where(Runs.shard == shard, Runs.id == run_id)
        )
    ).first()
    if row is None:
        return None, ()
    return row[0], tuple(row[1] or ())


async def has_rerun(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> bool:
    """Whether the run has a rerun (the bulk rerun skips it: running the bulk rerun
    again never reruns a run twice). ``ix_runs_rerun_of`` (shard, rerun_of)."""
    found = await conn.execute(
        select(Runs.id).where(Runs.shard == shard, Runs.rerun_of == run_id).limit(1)
    )
    return found.first() is not None


async def insert_rerun(
    conn: AsyncConnection,
    shard: int,
    new: NewRerun,
    seeded: Sequence[tasks.NewTask],
    events: Sequence[run_events.NewEvent],
) -> None:
    """Insert a rerun of key ``shard`` with the completed rows it reuses and its first
    history events (Client.rerun, the bulk rerun, in the transaction that locked the
    original; its decide_queue row follows, ``decide_queue.enqueue``). The run row by
    its primary key; the rows and events are ``decisions.write``'s own parts
    (``tasks.inserted``, ``run_events.appended``), every row taking the one key."""
    await conn.execute(
        insert(Runs.table).values(
            shard=shard,
            id=new.run_id,
            rerun_of=new.rerun_of,
            workflow_name=new.workflow_name,
            workflow_version=new.workflow_version,
            status=RunStatus.RUNNING,
            input=new.input,
        )
    )
    if seeded:
        await conn.execute(tasks.inserted(), tasks.inserted_params(shard, seeded))
    await conn.execute(run_events.appended(), run_events.appended_params(shard, events))
