"""``tasks``: one row per attempt of a node, partitioned monthly by run id.

Every statement filters on the run id (one partition). Updates that follow a
report are fenced on (run id, task id, attempt, active state): a stale report
matches nothing, changes nothing, and the caller learns it did not apply.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    DateTime,
    bindparam,
    cast,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import CreateTask, TaskError, TaskRecord
from legato.engine.repositories.params import (
    bool_array,
    in_array,
    int_array,
    rows_of,
    text_array,
    time_array,
    uuid_array,
)
from legato.schema import NodeKind, Tasks, TaskState
from legato.schema.enums import ACTIVE_TASK_STATES
from legato.schema.tables import ERROR_JSON
from legato.schema.types import JSON_VALUE


@dataclass(frozen=True)
class TaskRow:
    """A task row as the decider and ``Client.get_run`` read it."""

    task_id: uuid.UUID
    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    task_name: str | None
    queue: str | None
    output: JsonValue
    error: TaskError | None
    observed: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    def record(self) -> TaskRecord:
        return TaskRecord(
            task_id=self.task_id,
            node_id=self.node_id,
            iteration=self.iteration,
            attempt=self.attempt,
            kind=self.kind,
            state=self.state,
            output=self.output,
            error=self.error,
            observed=self.observed,
            created_at=self.created_at,
            finished_at=self.finished_at,
        )


async def load_many(
    conn: AsyncConnection, run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[TaskRow]]:
    """Every attempt of each run, in creation order (decider snapshot, Client.get_run).

    Served by ``ix_tasks_run_id_node_id_iteration_attempt`` in the runs' partitions.
    """
    result = await conn.execute(_load_statement(), {"run_ids": list(run_ids)})
    grouped: dict[uuid.UUID, list[TaskRow]] = {run_id: [] for run_id in run_ids}
    for row in result:
        fields = row._asdict()
        grouped[fields.pop("run_id")].append(TaskRow(**fields))
    return grouped


@cache
def _load_statement() -> Any:
    return (
        select(
            Tasks.run_id,
            Tasks.id.label("task_id"),
            Tasks.node_id,
            Tasks.iteration,
            Tasks.attempt,
            Tasks.kind,
            Tasks.state,
            Tasks.task_name,
            Tasks.queue,
            Tasks.output,
            Tasks.error,
            Tasks.observed,
            Tasks.created_at,
            Tasks.started_at,
            Tasks.finished_at,
        )
        .where(in_array(Tasks.run_id, uuid_array("run_ids")))
        .order_by(Tasks.run_id, Tasks.created_at, Tasks.node_id, Tasks.iteration, Tasks.attempt)
    )


async def insert_many(
    conn: AsyncConnection,
    creates: Sequence[tuple[uuid.UUID, CreateTask]],
    now: datetime,
    observed: Collection[uuid.UUID] = (),
) -> None:
    """Insert the attempts decisions created (decider loop): one INSERT over ``unnest``
    of array parameters for a whole batch of runs (one statement for the server, built
    once).

    A duplicate (run, node, iteration, attempt) violates the unique index and aborts
    the decision: the decider never creates an attempt twice.
    """
    if not creates:
        return
    finished = {TaskState.COMPLETED, TaskState.FAILED, TaskState.SKIPPED, TaskState.CANCELLED}
    rows = [create for _, create in creates]
    await conn.execute(
        _insert_statement(),
        {
            "run_ids": [run_id for run_id, _ in creates],
            "ids": [c.task_id for c in rows],
            "node_ids": [c.node_id for c in rows],
            "iterations": [c.iteration for c in rows],
            "attempts": [c.attempt for c in rows],
            "kinds": [c.kind.value for c in rows],
            "states": [c.state.value for c in rows],
            "task_names": [c.task_name for c in rows],
            "queues": [c.queue for c in rows],
            "inputs": [JSON_VALUE.dump_text(c.input) for c in rows],
            "outputs": [JSON_VALUE.dump_text(c.output) for c in rows],
            "errors": [ERROR_JSON.dump_text(c.error) for c in rows],
            "event_names": [c.event_name for c in rows],
            "available_ats": [c.available_at for c in rows],
            "finished_ats": [now if c.state in finished else None for c in rows],
            # Rows born terminal are recorded by the decision that creates them.
            "observed": [c.task_id in observed for c in rows],
            "now": now,
        },
    )


@cache
def _insert_statement() -> Any:
    given = rows_of(
        "given",
        run_id=uuid_array("run_ids"),
        id=uuid_array("ids"),
        node_id=text_array("node_ids"),
        iteration=int_array("iterations"),
        attempt=int_array("attempts"),
        kind=text_array("kinds"),
        state=text_array("states"),
        task_name=text_array("task_names"),
        queue=text_array("queues"),
        input=text_array("inputs"),
        output=text_array("outputs"),
        error=text_array("errors"),
        event_name=text_array("event_names"),
        available_at=time_array("available_ats"),
        finished_at=time_array("finished_ats"),
        observed=bool_array("observed"),
    )
    return insert(Tasks.table).from_select(
        [
            "run_id",
            "id",
            "node_id",
            "iteration",
            "attempt",
            "kind",
            "state",
            "task_name",
            "queue",
            "input",
            "output",
            "error",
            "event_name",
            "created_at",
            "available_at",
            "finished_at",
            "observed",
        ],
        select(
            given.c.run_id,
            given.c.id,
            given.c.node_id,
            given.c.iteration,
            given.c.attempt,
            given.c.kind,
            given.c.state,
            given.c.task_name,
            given.c.queue,
            cast(given.c.input, JSONB),
            cast(given.c.output, JSONB),
            cast(given.c.error, JSONB),
            given.c.event_name,
            bindparam("now", type_=DateTime(timezone=True)),
            given.c.available_at,
            given.c.finished_at,
            given.c.observed,
        ),
    )


@dataclass(frozen=True)
class Transition:
    """A fenced move of one attempt from an active state to ``state``."""

    run_id: uuid.UUID
    task_id: uuid.UUID
    attempt: int | None  # None: fenced on the task id alone (ids are per attempt)
    state: TaskState
    output: JsonValue = None
    error: TaskError | None = None
    from_states: Collection[TaskState] = ACTIVE_TASK_STATES
    # The decider writes this move's history in the same decision (its own resolves).
    observed: bool = False


async def transition_many(
    conn: AsyncConnection, moves: Sequence[Transition]
) -> dict[uuid.UUID, str | None]:
    """Apply fenced transitions; returns, for each one that applied, its task id and the
    attempt's queue name (None for rows without one). A stale move is simply absent.

    Callers: worker reports, timer loop, lease sweeper, decider (waits completed by a
    signal, cancellation, child completion). One UPDATE per distinct set of allowed
    source states, joined to ``unnest`` of array parameters (built once); primary keys
    of the runs' partitions.
    """
    applied: dict[uuid.UUID, str | None] = {}
    by_source: dict[frozenset[TaskState], list[Transition]] = {}
    for move in moves:
        by_source.setdefault(frozenset(move.from_states), []).append(move)
    for sources, group in by_source.items():
        result = await conn.execute(
            _transition_statement(),
            {
                "run_ids": [m.run_id for m in group],
                "task_ids": [m.task_id for m in group],
                "attempts": [m.attempt for m in group],
                "states": [m.state.value for m in group],
                "outputs": [JSON_VALUE.dump_text(m.output) for m in group],
                "errors": [ERROR_JSON.dump_text(m.error) for m in group],
                "observed": [m.observed for m in group],
                "fence_run_ids": sorted({m.run_id for m in group}),
                "sources": sorted(sources),
            },
        )
        applied.update(dict(result.all()))
    return applied


@cache
def _transition_statement() -> Any:
    moved = rows_of(
        "moves",
        run_id=uuid_array("run_ids"),
        task_id=uuid_array("task_ids"),
        attempt=int_array("attempts"),
        state=text_array("states"),
        output=text_array("outputs"),
        error=text_array("errors"),
        observed=bool_array("observed"),
    )
    return (
        update(Tasks.table)
        .where(
            in_array(Tasks.run_id, uuid_array("fence_run_ids")),
            Tasks.run_id == moved.c.run_id,
            Tasks.id == moved.c.task_id,
            or_(moved.c.attempt.is_(None), Tasks.attempt == moved.c.attempt),
            in_array(Tasks.state, text_array("sources")),
        )
        .values(
            state=moved.c.state,
            output=cast(moved.c.output, JSONB),
            error=cast(moved.c.error, JSONB),
            finished_at=func.now(),
            lease_owner=None,
            observed=moved.c.observed,
        )
        .returning(Tasks.id, Tasks.queue)
    )


async def mark_observed(
    conn: AsyncConnection, observed: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> None:
    """Record that the decider has written these terminal rows' history (decider loop).
    One UPDATE for the batch; primary keys."""
    if observed:
        await conn.execute(
            update(Tasks.table)
            .where(
                in_array(Tasks.run_id, uuid_array("run_ids", {r for r, _ in observed})),
                # Task ids are unique across runs; the run ids prune partitions.
                in_array(Tasks.id, uuid_array("task_ids", [t for _, t in observed])),
            )
            .values(observed=True)
        )


@dataclass(frozen=True)
class AttemptTiming:
    task_id: uuid.UUID
    state: TaskState
    queue: str | None
    available_at: datetime | None
    started_at: datetime | None


async def timings(
    conn: AsyncConnection, keys: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> dict[uuid.UUID, AttemptTiming]:
    """Attempts' state, queue and start times (timer loop, before acting on a
    schedule-to-start or start-to-close timer). Primary keys of the runs' partitions."""
    if not keys:
        return {}
    result = await conn.execute(
        select(Tasks.id, Tasks.state, Tasks.queue, Tasks.available_at, Tasks.started_at).where(
            in_array(Tasks.run_id, uuid_array("run_ids", {r for r, _ in keys})),
            in_array(Tasks.id, uuid_array("task_ids", [t for _, t in keys])),
        )
    )
    return {row[0]: AttemptTiming(*row) for row in result}


async def release_attempts(
    conn: AsyncConnection, attempts: Sequence[tuple[uuid.UUID, uuid.UUID, int]]
) -> None:
    """Put RUNNING attempts back to QUEUED (worker graceful shutdown), so another worker
    takes them at once. Fenced on attempt and state. Primary keys."""
    for run_id, task_id, attempt in attempts:
        await conn.execute(
            update(Tasks.table)
            .where(
                Tasks.run_id == run_id,
                Tasks.id == task_id,
                Tasks.attempt == attempt,
                Tasks.state == TaskState.RUNNING,
            )
            .values(state=TaskState.QUEUED, started_at=None, lease_owner=None)
        )


async def open_waits(conn: AsyncConnection, event_name: str) -> list[uuid.UUID]:
    """Runs with a wait open for ``event_name`` (Client.emit). Served by the partial
    index ``ix_tasks_open_waits`` (only WAITING event rows are in it)."""
    result = await conn.execute(
        select(Tasks.run_id)
        .where(Tasks.state == TaskState.WAITING, Tasks.event_name == event_name)
        .distinct()
    )
    return list(result.scalars())
