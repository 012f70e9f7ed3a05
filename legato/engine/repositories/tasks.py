"""``tasks``: one row per attempt of a node, partitioned monthly by run id.

Every statement filters on the run's shard key (the parameter ``shard``) and the run
id (one partition), except the emit's fan-out :func:`open_waits`. Updates that follow a
report are fenced on (run id, task id, attempt, active state): a stale report
matches nothing, changes nothing, and the caller learns it did not apply.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import (
    Insert,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    false,
    func,
    literal_column,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate, Update

from legato.engine.repositories import routed
from legato.engine.repositories.params import (
    SHARD_COUNT_PARAM,
    SHARD_PARAM,
    SHARDS_PARAM,
    Unnest,
    fan_out,
    in_array,
    run_shard,
    shard_param,
    shards_param,
    text_array,
    uuid_array,
)
from legato.engine.repositories.precompiled import execute_in
from legato.engine.repositories.signals import PendingSignal
from legato.schema import NodeKind, Runs, RunStatus, Signals, Tasks, TaskState
from legato.schema.enums import ACTIVE_TASK_STATES
from legato.schema.values import TaskError


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
    cached: bool  # a COMPLETED attempt whose output the output cache served


# The columns of a ``TaskRow``, in its field order: a query reading attempts selects
# these (then any columns of its own) so each row builds the row type positionally.
TASK_ROW_COLUMNS = (
    Tasks.id,
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
    Tasks.cached,
)


async def load_many(
    conn: AsyncConnection, shard: int, run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[TaskRow]]:
    """Every attempt of each run of key ``shard``, in creation order (Client.get_run; the
    decider reads them with its signals, :func:`snapshots`).

    Served by ``ix_tasks_shard_run_id_node_id_iteration_attempt`` in the runs' partitions.
    """
    result = await conn.execute(_load_statement(), {SHARD_PARAM: shard, "run_ids": list(run_ids)})
    grouped: dict[uuid.UUID, list[TaskRow]] = {run_id: [] for run_id in run_ids}
    for row in result:
        grouped[row[0]].append(TaskRow(*row[1:]))
    return grouped


@cache
def _load_statement() -> Select[
    uuid.UUID,
    uuid.UUID,
    str,
    int,
    int,
    NodeKind,
    TaskState,
    str,
    str,
    JsonValue,
    TaskError,
    bool,
    datetime,
    datetime,
    datetime,
    bool,
]:
    return (
        select(Tasks.run_id, *TASK_ROW_COLUMNS)
        .where(Tasks.shard == shard_param(), in_array(Tasks.run_id, uuid_array("run_ids")))
        .order_by(Tasks.run_id, Tasks.created_at, Tasks.node_id, Tasks.iteration, Tasks.attempt)
    )


async def snapshots(
    conn: AsyncConnection, shard: int, run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[list[TaskRow], list[PendingSignal]]]:
    """Each run's attempts, in creation order, and its unconsumed signals, oldest first:
    the decider's snapshot of a batch of locked runs of key ``shard`` in ONE read
    (decider loop); both parts filter on the key.

    ``load_many``'s rows ``UNION ALL`` the runs' unconsumed signals, told apart by a
    leading 0 / 1; a signal rides in the task columns (id, name as ``task_name``,
    payload as ``output``, created_at as ``started_at``), so its order is its id's.
    Served by ``ix_tasks_shard_run_id_node_id_iteration_attempt`` and the partial index
    ``ix_signals_pending`` (shard, run_id, id) in the runs' partitions; built once.
    """
    result = await conn.execute(
        _snapshot_statement(False), {SHARD_PARAM: shard, "run_ids": list(run_ids)}
    )
    return grouped(run_ids, result)


async def snapshots_held(
    conn: AsyncConnection, keys: Sequence[int], run_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[list[TaskRow], list[PendingSignal]]]:
    """:func:`snapshots` of locked runs of any of ``keys`` in ONE read (decider loop of a
    single-node installation): ``shard = ANY`` over the batch's keys; the same indexes."""
    result = await conn.execute(
        _snapshot_statement(True), {SHARDS_PARAM: list(keys), "run_ids": list(run_ids)}
    )
    return grouped(run_ids, result)


def grouped(
    run_ids: Sequence[uuid.UUID], result: Iterable[Sequence[Any]]
) -> dict[uuid.UUID, tuple[list[TaskRow], list[PendingSignal]]]:
    """The snapshot's rows (run_id, which, then TASK_ROW_COLUMNS) by run, each of
    ``run_ids`` present; a row of another run is left out."""
    by_run: dict[uuid.UUID, tuple[list[TaskRow], list[PendingSignal]]] = {
        run_id: ([], []) for run_id in run_ids
    }
    for row in result:
        found = by_run.get(row[0])
        if found is None:
            continue
        rows, buffered = found
        if row[1] == 0:
            rows.append(TaskRow(*row[2:]))
        else:
            buffered.append(PendingSignal(row[2], row[8], row[10], row[14]))
    return by_run


@cache
def _snapshot_statement(spanning: bool) -> Any:
    run_ids = uuid_array("run_ids")

    def key(column: Any) -> Any:
        return in_array(column, shards_param()) if spanning else column == shard_param()

    attempts = select(Tasks.run_id, literal_column("0", Integer()), *TASK_ROW_COLUMNS).where(
        key(Tasks.shard), in_array(Tasks.run_id, run_ids)
    )
    pending = select(
        Signals.run_id,
        literal_column("1", Integer()),
        Signals.id,
        *(null() for _ in range(5)),  # node_id, iteration, attempt, kind, state
        Signals.name,
        null(),  # queue
        Signals.payload,
        null(),  # error
        false(),  # observed
        null(),  # created_at: NULL sorts last, so a signal's order is its id's
        Signals.created_at,
        null(),  # finished_at
        false(),  # cached
    ).where(
        key(Signals.shard),
        in_array(Signals.run_id, run_ids),
        Signals.consumed_at.is_(None),
    )
    # Positions in the union: run_id, which, then TASK_ROW_COLUMNS.
    return union_all(attempts, pending).order_by(
        *(literal_column(str(n)) for n in (1, 2, 14, 4, 5, 6, 3))
    )


class NewTask(NamedTuple):
    """A ``tasks`` row a decision creates (its fields are the columns it fills)."""

    run_id: uuid.UUID
    id: uuid.UUID
    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    task_name: str | None
    queue: str | None
    input: JsonValue
    output: JsonValue
    error: TaskError | None
    event_name: str | None
    created_at: datetime
    available_at: datetime | None
    finished_at: datetime | None
    # Rows born terminal are recorded by the decision that creates them.
    observed: bool
    # An attempt handed to the decider's own worker is born RUNNING, started at the
    # decision's clock and held by that worker (``legato.engine.transport.handoff``).
    started_at: datetime | None = None
    lease_owner: str | None = None


_NEW_TASKS = Unnest("new_tasks", NewTask, Tasks)


@cache
def inserted(spanning: bool = False) -> Insert:
    """Insert the attempts a batch of decisions created in key ``:shard``
    (``decisions.write``, bound by :func:`inserted_params`): one INSERT over ``unnest``
    of array parameters, every row taking the one key; built once.

    A duplicate (run, node, iteration, attempt) violates the unique index and aborts
    the decision: the decider never creates an attempt twice.
    """
    key = run_shard(_NEW_TASKS.value("run_id")) if spanning else shard_param()
    return _NEW_TASKS.insert(shard=key)


@cache
def inserted_routed() -> Insert:
    """:func:`inserted` on a distributed install (``routed.anchored``: the tasks joined to
    their runs of key ``:in_shard``, so Citus routes it to the key's node); a statement
    of ``decisions.write`` of its own there, bound by :func:`inserted_params`."""
    return routed.anchored(_NEW_TASKS)


def inserted_params(shard: int, rows: Sequence[NewTask]) -> dict[str, Any]:
    return {**_NEW_TASKS.bind(rows), SHARD_PARAM: shard}


class Transition(NamedTuple):
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
    cached: bool = False  # a completion served by the output cache


_MOVES = Unnest(
    "moves",
    Transition,
    Tasks,
    fields=("run_id", "task_id", "attempt", "state", "output", "error", "observed", "cached"),
    columns={"task_id": Tasks.id},
)


async def transition_many(
    conn: AsyncConnection, shard: int, moves: Sequence[Transition]
) -> dict[uuid.UUID, str | None]:
    """Apply fenced transitions of attempts of key ``shard``; returns, for each one that
    applied, its task id and the attempt's queue name (None for rows without one). A
    stale move is simply absent.

    Callers: worker reports, timer loop, lease sweeper, decider (waits completed by a
    signal, cancellation, child completion). One UPDATE per distinct set of allowed
    source states, joined to ``unnest`` of array parameters (built once); primary keys
    (shard, run_id, id) of the runs' partitions.
    """
    applied: dict[uuid.UUID, str | None] = {}
    for sources, group in _by_source(moves).items():
        rows = await execute_in(conn, moved(), moved_params(shard, group, sources))
        applied.update((row[0], row[1]) for row in rows)
    return applied


async def transition_many_held(
    conn: AsyncConnection, count: int, moves: Sequence[Transition]
) -> dict[uuid.UUID, str | None]:
    """:func:`transition_many` of attempts of runs of any key, in ONE statement per set of
    source states (report flushes of a single-node installation: worker, timer loop,
    lease sweeper; ``count`` is the installation's key count): each row is matched in
    its run's key, computed from its run id (``params.run_shard``), so the primary key
    (shard, run_id, id) serves each row as in :func:`transition_many`."""
    applied: dict[uuid.UUID, str | None] = {}
    for sources, group in _by_source(moves).items():
        params = moved_held_params(count, group, sources)
        applied.update((row[0], row[1]) for row in await execute_in(conn, moved(True), params))
    return applied


def _by_source(moves: Sequence[Transition]) -> dict[frozenset[TaskState], list[Transition]]:
    by_source: dict[frozenset[TaskState], list[Transition]] = {}
    for move in moves:
        by_source.setdefault(frozenset(move.from_states), []).append(move)
    return by_source


def moved_params(
    shard: int, moves: Sequence[Transition], sources: Collection[TaskState]
) -> dict[str, Any]:
    """The parameters of :func:`moved` for ``moves`` of key ``shard`` that all leave one
    of ``sources``."""
    return {**_moves_params(moves, sources), SHARD_PARAM: shard}


def moved_held_params(
    count: int, moves: Sequence[Transition], sources: Collection[TaskState]
) -> dict[str, Any]:
    """The parameters of ``moved(spanning=True)`` for ``moves`` of runs of any key (the
    installation has ``count`` keys) that all leave one of ``sources``."""
    return {**_moves_params(moves, sources), SHARD_COUNT_PARAM: count}


def _moves_params(moves: Sequence[Transition], sources: Collection[TaskState]) -> dict[str, Any]:
    return {
        **_MOVES.bind(moves),
        "fence_run_ids": sorted({m.run_id for m in moves}),
        "sources": sorted(sources),
    }


@cache
def moved(spanning: bool = False) -> ReturningUpdate[uuid.UUID, str]:
    """:func:`transition_many`'s fenced UPDATE, returning each applied move's task id and
    queue (also a CTE of ``decisions.write``); ``spanning``: each row in its run's key
    (:func:`transition_many_held`), else every row in key ``:in_shard``."""
    attempt = _MOVES.value("attempt")
    return _MOVES.update(
        Tasks.shard == (run_shard(_MOVES.value("run_id")) if spanning else shard_param()),
        in_array(Tasks.run_id, uuid_array("fence_run_ids")),
        Tasks.run_id == _MOVES.value("run_id"),
        Tasks.id == _MOVES.value("task_id"),
        or_(attempt.is_(None), Tasks.attempt == attempt),
        in_array(Tasks.state, text_array("sources")),
        keys=("run_id", "task_id", "attempt"),
        finished_at=func.now(),
        lease_owner=None,
    ).returning(Tasks.id, Tasks.queue)


@cache
def marked_observed(spanning: bool = False) -> Update:
    """Record that the decider has written these terminal rows' history
    (``decisions.write``, bound by :func:`marked_observed_params`). One UPDATE for the
    batch, within key ``:shard``; primary keys (shard, run_id, id) of the runs'
    partitions; built once."""
    return (
        update(Tasks.table)
        .where(
            in_array(Tasks.shard, shards_param()) if spanning else Tasks.shard == shard_param(),
            in_array(Tasks.run_id, uuid_array("observed_run_ids")),
            # Task ids are unique across runs; the run ids prune partitions.
            in_array(Tasks.id, uuid_array("observed_task_ids")),
        )
        .values(observed=True)
    )


def marked_observed_params(
    shard: int, observed: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> dict[str, Any]:
    return {
        SHARD_PARAM: shard,
        "observed_run_ids": sorted({r for r, _ in observed}),
        "observed_task_ids": [t for _, t in observed],
    }


@dataclass(frozen=True)
class AttemptTiming:
    task_id: uuid.UUID
    state: TaskState
    queue: str | None
    available_at: datetime | None
    started_at: datetime | None


async def timings(
    conn: AsyncConnection, shard: int, keys: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> dict[uuid.UUID, AttemptTiming]:
    """Attempts' state, queue and start times, all of key ``shard`` (timer loop, before
    acting on a schedule-to-start or start-to-close timer). Primary keys (shard, run_id,
    id) of the runs' partitions."""
    if not keys:
        return {}
    result = await conn.execute(
        select(Tasks.id, Tasks.state, Tasks.queue, Tasks.available_at, Tasks.started_at).where(
            Tasks.shard == shard,
            in_array(Tasks.run_id, uuid_array("run_ids", {r for r, _ in keys})),
            in_array(Tasks.id, uuid_array("task_ids", [t for _, t in keys])),
        )
    )
    return {row[0]: AttemptTiming(*row) for row in result}


async def release_attempts(
    conn: AsyncConnection, shard: int, attempts: Sequence[tuple[uuid.UUID, uuid.UUID, int]]
) -> None:
    """Put RUNNING attempts of key ``shard`` back to QUEUED (worker graceful shutdown), so
    another worker takes them at once. Fenced on attempt and state. Primary keys
    (shard, run_id, id)."""
    for run_id, task_id, attempt in attempts:
        await conn.execute(
            update(Tasks.table)
            .where(
                Tasks.shard == shard,
                Tasks.run_id == run_id,
                Tasks.id == task_id,
                Tasks.attempt == attempt,
                Tasks.state == TaskState.RUNNING,
            )
            .values(state=TaskState.QUEUED, started_at=None, lease_owner=None)
        )


async def open_waits(conn: AsyncConnection, event_name: str) -> dict[uuid.UUID, str]:
    """Fan-out across shard keys: the runs of every key an emit of ``event_name``
    delivers to (Client.emit, which then signals them one statement per key), each with
    its workflow's name, in run-id order: RUNNING, with a wait open for the event, and no
    unconsumed signal of that name buffered (an earlier emit their decider has not taken
    yet). One statement whatever the number of runs; served by the partial index
    ``ix_tasks_open_waits`` (only WAITING event rows are in it), then the runs' and
    signals' primary-key partitions (``ix_signals_pending``), each joined within the
    task's own key. Built once."""
    result = await conn.execute(_open_waits_statement(), {"event_name": event_name})
    return dict(result.all())


@cache
def _open_waits_statement() -> Select[uuid.UUID, str]:
    event_name = bindparam("event_name", type_=Text())
    buffered = select(Signals.run_id).where(
        Signals.shard == Tasks.shard,
        Signals.run_id == Tasks.run_id,
        Signals.name == event_name,
        Signals.consumed_at.is_(None),
    )
    return fan_out(
        select(Runs.id, Runs.workflow_name)
        .join_from(
            Tasks.table, Runs.table, and_(Runs.shard == Tasks.shard, Runs.id == Tasks.run_id)
        )
        .where(
            Tasks.state == TaskState.WAITING,
            Tasks.event_name == event_name,
            Runs.status == RunStatus.RUNNING,
            ~buffered.exists(),
        )
        .distinct()
        .order_by(Runs.id)
    )
