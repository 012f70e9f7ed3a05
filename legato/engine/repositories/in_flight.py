"""Runs in flight and how far each has got: the reads of ``legato deploy --check``.

Both statements read every shard key's runs (the check is about the whole database),
a page at a time, and write nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Integer, Select, literal_column, null, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import fan_out, in_array, uuid_array
from legato.schema import DecideQueue, NodeKind, Runs, RunStatus, Signals, Tasks, TaskState


@dataclass(frozen=True)
class InFlightRun:
    """A RUNNING run: its workflow version, its input, whether it is quarantined."""

    run_id: uuid.UUID
    workflow_name: str
    workflow_version: int
    input: JsonValue
    quarantined: bool


@dataclass(frozen=True)
class NodeRow:
    """The latest attempt of one node (and map element) of a run."""

    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    output: JsonValue


@dataclass
class Progress:
    """A run's node rows, latest attempt only, keyed by (node id, iteration), and its
    unconsumed signals (name, payload), oldest first."""

    rows: dict[tuple[str, int], NodeRow] = field(default_factory=dict)
    signals: list[tuple[str, JsonValue]] = field(default_factory=list)


async def running_page(
    conn: AsyncConnection, after: uuid.UUID | None, limit: int
) -> list[InFlightRun]:
    """Fan-out across shard keys: up to ``limit`` RUNNING runs with ids above ``after``,
    in id order, each with whether its ``decide_queue`` row is quarantined (deploy check,
    a page at a time). No shard key filter: every partition's part of the partial index
    ``ix_runs_active`` (keyset by id), and ``decide_queue``'s primary key per run."""
    statement = _running_page_statement()
    if after is not None:
        statement = statement.where(Runs.id > after)
    result = await conn.execute(fan_out(statement.limit(limit)))
    return [InFlightRun(*row) for row in result]


def _running_page_statement() -> Select[uuid.UUID, str, int, JsonValue, bool]:
    return (
        select(
            Runs.id,
            Runs.workflow_name,
            Runs.workflow_version,
            Runs.input,
            DecideQueue.quarantined_at.is_not(None),
        )
        .select_from(Runs.table)
        .outerjoin(
            DecideQueue.table,
            (DecideQueue.shard == Runs.shard) & (DecideQueue.run_id == Runs.id),
        )
        .where(Runs.status == RunStatus.RUNNING)
        .order_by(Runs.id)
    )


async def progress(conn: AsyncConnection, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, Progress]:
    """Fan-out across shard keys: the node rows (latest attempt of each node and map
    element) and unconsumed signals of ``run_ids``, a page of :func:`running_page`
    whose runs may sit in any partition (deploy check). One ``UNION ALL`` read, told
    apart by a leading 0 / 1, served by ``ix_tasks_shard_run_id_node_id_iteration_attempt``
    and the partial index ``ix_signals_pending`` in the runs' partitions; built once."""
    result = await conn.execute(_progress_statement(), {"run_ids": run_ids})
    found: dict[uuid.UUID, Progress] = {run_id: Progress() for run_id in run_ids}
    for run_id, which, node_id, iteration, attempt, kind, state, output, _ in result:
        run = found[run_id]
        if which == 1:
            run.signals.append((node_id, output))
            continue
        key = (node_id, iteration)
        seen = run.rows.get(key)
        if seen is None or seen.attempt < attempt:
            run.rows[key] = NodeRow(node_id, iteration, attempt, kind, state, output)
    return found


@cache
def _progress_statement() -> Any:
    run_ids = uuid_array("run_ids")
    attempts = fan_out(
        select(
            Tasks.run_id,
            literal_column("0", Integer()),
            Tasks.node_id,
            Tasks.iteration,
            Tasks.attempt,
            Tasks.kind,
            Tasks.state,
            Tasks.output,
            null(),  # a signal's id
        )
    ).where(in_array(Tasks.run_id, run_ids))
    pending = select(
        Signals.run_id,
        literal_column("1", Integer()),
        Signals.name,
        null(),  # iteration
        null(),  # attempt
        null(),  # kind
        null(),  # state
        Signals.payload,
        Signals.id,
    ).where(in_array(Signals.run_id, run_ids), Signals.consumed_at.is_(None))
    # Positions: run_id, which, ..., the signal's id (its order: oldest first).
    return union_all(attempts, pending).order_by(*(literal_column(str(n)) for n in (1, 2, 9)))
