"""``runs``: one row per run, partitioned monthly by its UUIDv7 id.

Every statement filters on the run's shard key and id (one key, one partition) except
the listing, a fan-out across keys. A start inserts a run with its first history event
and its decide_queue row, all three carrying the one key of the statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import (
    BigInteger,
    DateTime,
    Insert,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.db.server_check import adopt_installation
from legato.engine.repositories import routed as routed_statements
from legato.engine.repositories.notify import schema_of
from legato.engine.repositories.params import (
    SHARD_COUNT_PARAM,
    Unnest,
    fan_out,
    in_array,
    run_shard,
    shard_param,
    shards_param,
    uuid_array,
)
from legato.engine.repositories.run_filters import conditions_of
from legato.engine.transport.driver import DriverStatements
from legato.models import RunFilter
from legato.schema import DecideQueue, Installation, RunEvents, Runs, RunStatus, Shards
from legato.schema.layout import routed, routed_engine
from legato.schema.values import TaskError


@dataclass(frozen=True)
class RunRow:
    id: uuid.UUID
    workflow_name: str
    workflow_version: int
    status: RunStatus
    input: JsonValue
    output: JsonValue
    error: TaskError | None
    parent_run_id: uuid.UUID | None
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None
    timed_out: bool = False
    # Started from SQL: its input has not been checked against the workflow's model.
    input_unchecked: bool = False
    trace_context: JsonValue = None  # the starter's W3C trace context, for its attempts


# The columns every read of a run selects, in order, as typed by the schema.
_RunColumns = tuple[
    uuid.UUID,
    str,
    int,
    RunStatus,
    JsonValue,
    JsonValue,
    TaskError,
    uuid.UUID | None,
    datetime,
    datetime,
    datetime,
    datetime,
    bool,
    JsonValue,
]


# What every read of a run selects, in ``RunRow``'s order (``run_row`` reads it back).
RUN_COLUMNS = (
    Runs.id,
    Runs.workflow_name,
    Runs.workflow_version,
    Runs.status,
    Runs.input,
    Runs.output,
    Runs.error,
    Runs.parent_run_id,
    Runs.cancel_requested_at,
    Runs.created_at,
    Runs.finished_at,
    Runs.timed_out_at,
    Runs.input_unchecked,
    Runs.trace_context,
)


def _select() -> Select[*_RunColumns]:
    return select(*RUN_COLUMNS)


def run_row(row: tuple[*_RunColumns] | Sequence[Any]) -> RunRow:
    (
        run_id,
        name,
        version,
        status,
        input_,
        output,
        error,
        parent,
        cancel,
        created,
        finished,
        timed_out_at,
        input_unchecked,
        trace_context,
    ) = row
    return RunRow(
        id=run_id,
        workflow_name=name,
        workflow_version=version,
        status=status,
        input=input_,
        output=output,
        error=error,
        parent_run_id=parent,
        cancel_requested=cancel is not None,
        created_at=created,
        finished_at=finished,
        timed_out=timed_out_at is not None,
        input_unchecked=input_unchecked,
        trace_context=trace_context,
    )


@dataclass(frozen=True)
class NewRun:
    """A ``runs`` row a start inserts (RUNNING), with its first event and decide row."""

    run_id: uuid.UUID
    workflow_name: str
    workflow_version: int
    input: JsonValue
    parent_run_id: uuid.UUID | None = None
    idempotency_key: str | None = None
    scheduled_at: datetime | None = None
    trace_context: JsonValue = None


_NEW_RUNS = Unnest("given", NewRun, Runs, columns={"run_id": Runs.id})


async def installed_shards(conn: AsyncConnection) -> Shards:
    """The installation's shard keys, as migration 0011 recorded them (a Client made
    from an engine, the schedule loop): read once per process. One-row table."""
    count = (await conn.execute(select(Installation.shard_count))).scalar_one()
    return await adopt_installation(conn, schema_of(conn), int(count))


def _with_history_and_queue(
    inserted: Insert, scheduled: bool, spanning: bool = False
) -> Select[uuid.UUID]:
    """``inserted`` (an INSERT of RUNNING runs in key ``:shard``, or each in its own key
    when ``spanning``) with each run's first history event and its decide_queue row, as
    data-modifying CTEs: available now (the column's default) or, when ``scheduled``, at
    ``scheduled_at`` (``:now`` for a run without one: a time given as a parameter, not
    ``now()`` inside COALESCE)."""
    started = inserted.returning(Runs.id, Runs.scheduled_at, Runs.shard).cte("started")
    shard = started.c.shard if spanning else shard_param()
    history = insert(RunEvents.table).from_select(
        ["shard", "run_id", "seq", "type"],
        select(shard, started.c.id, literal(1, BigInteger()), literal("run_started", Text())),
    )
    columns = ["shard", "run_id", "reason"]
    values: list[Any] = [shard, started.c.id, bindparam("reason", type_=Text())]
    if scheduled:
        columns.append("available_at")
        values.append(
            func.coalesce(started.c.scheduled_at, bindparam("now", type_=DateTime(timezone=True)))
        )
    queued = insert(DecideQueue.table).from_select(
        columns, select(*values).order_by(started.c.shard, started.c.id)
    )
    return select(started.c.id).add_cte(history.cte("history"), queued.cte("queued"))


_RUNNING = literal(RunStatus.RUNNING.value, Text())


@cache
def _start_statement(scheduled: bool, spanning: bool = False) -> Select[uuid.UUID]:
    shard = run_shard(_NEW_RUNS.value("run_id")) if spanning else shard_param()
    return _with_history_and_queue(
        _NEW_RUNS.insert(status=_RUNNING, shard=shard), scheduled, spanning
    )


@cache
def _start_one_statement(scheduled: bool) -> Select[uuid.UUID]:
    return _with_history_and_queue(
        _NEW_RUNS.insert_one(status=_RUNNING, shard=shard_param()), scheduled
    )


@cache
def _start_children_statement() -> Select[uuid.UUID]:
    parent = Runs.table.alias("parent")
    inherited = (
        select(parent.c.trace_context)
        .where(parent.c.shard == shard_param(), parent.c.id == _NEW_RUNS.value("parent_run_id"))
        .scalar_subquery()
    )
    return _with_history_and_queue(
        _NEW_RUNS.insert(status=_RUNNING, trace_context=inherited, shard=shard_param()), False
    )


async def start_runs(
    conn: AsyncConnection,
    shard: int,
    new_runs: Sequence[NewRun],
    reason: str,
    *,
    children: bool = False,
) -> None:
    """Start runs of ONE shard key in ONE statement (Client.start_many per key,
    Client.start with an idempotency key or a caller's connection, the schedule loop,
    and the decider for child runs): insert the RUNNING runs, their first history event
    and their decide_queue rows (available at ``scheduled_at`` or now); the decide_queue
    trigger NOTIFYs the deciders with the key. Every run id lies in ``shard``
    (``Shards.of_run``); a batch spanning keys is one call per key (``Shards.group``).

    With ``children`` each run takes its parent's trace context in the same INSERT
    (its own is ignored), so a child's attempts join the trace of the request that
    started the parent; a child lives in its parent's key.

    A single statement is atomic on its own, so a start outside a transaction is one
    round trip. Data-modifying CTEs over ``unnest`` of array parameters: one shape for
    any number of runs, built once. Primary keys of ``runs`` (a child's parent too),
    ``run_events`` and ``decide_queue``, each led by the key.
    """
    if not new_runs:
        return
    scheduled = not children and any(new.scheduled_at is not None for new in new_runs)
    if routed(conn):
        await _start_routed(conn, shard, new_runs, reason, children, scheduled)
        return
    statement = _start_children_statement() if children else _start_statement(scheduled)
    params = {**_NEW_RUNS.bind(new_runs), "reason": reason, "in_shard": shard}
    if scheduled:
        params["now"] = datetime.now(UTC)
    await conn.execute(statement, params)


async def start_runs_of_keys(
    conn: AsyncConnection, shards: Shards, new_runs: Sequence[NewRun], reason: str
) -> None:
    """Start runs of ANY keys (``Client.start_many``): on a single-node installation in
    ONE statement, each row in its run's key (``params.run_shard``, the key being in the
    id), the decide rows in (key, run id) order; on a distributed one (or for one key)
    :func:`start_runs` per key, keys ascending. The indexes of :func:`start_runs`."""
    grouped: dict[int, list[NewRun]] = {}
    for new in new_runs:
        grouped.setdefault(shards.of_run(new.run_id), []).append(new)
    if len(grouped) > 1 and not shards.distributed and not routed(conn):
        params = {**_NEW_RUNS.bind(new_runs), "reason": reason, SHARD_COUNT_PARAM: shards.count}
        await conn.execute(_start_statement(False, True), params)
        return
    for shard, group in sorted(grouped.items()):
        await start_runs(conn, shard, group, reason)


async def start_one(driver: DriverStatements, shard: int, new: NewRun, reason: str) -> None:
    """Start ONE run in key ``shard``, committed on its own (Client.start without an
    idempotency key or a caller's connection): the rows of ``start_runs`` from scalar
    parameters, on the asyncpg driver path (legato/engine/transport/driver.py) — the
    hottest single-row write a client makes. Primary keys of ``runs``, ``run_events``
    and ``decide_queue``, each led by the key."""
    if routed_engine(driver.engine):  # several statements: in a transaction of their own
        async with driver.engine.begin() as conn:
            await start_runs(conn, shard, [new], reason)
        return
    scheduled = new.scheduled_at is not None
    params = {**_NEW_RUNS.bind_one(new), "reason": reason, "in_shard": shard}
    if scheduled:
        params["now"] = new.scheduled_at
    await driver.execute(_start_one_statement(scheduled), params)


async def _start_routed(
    conn: AsyncConnection,
    shard: int,
    new_runs: Sequence[NewRun],
    reason: str,
    children: bool,
    scheduled: bool,
) -> None:
    """``start_runs`` on a distributed install (``routed.start_runs``)."""
    rows = [
        {
            "id": new.run_id,
            "workflow_name": new.workflow_name,
            "workflow_version": new.workflow_version,
            "status": RunStatus.RUNNING,
            "input": new.input,
            "parent_run_id": new.parent_run_id,
            "idempotency_key": new.idempotency_key,
            "scheduled_at": new.scheduled_at,
            "trace_context": new.trace_context,
            "shard": shard,
        }
        for new in new_runs
    ]
    await routed_statements.start_runs(
        conn,
        shard,
        rows,
        reason,
        scheduled_now=datetime.now(UTC) if scheduled else None,
        children=routed_statements.children_statement(_NEW_RUNS) if children else None,
        params={**_NEW_RUNS.bind(new_runs), "in_shard": shard},
    )


@cache
def _lock_statement(spanning: bool) -> Select[*_RunColumns, int]:
    last_seq = (
        select(func.coalesce(func.max(RunEvents.seq), 0))
        .where(
            RunEvents.shard == (Runs.shard if spanning else shard_param()),
            RunEvents.run_id == Runs.id,
        )
        .scalar_subquery()
    )
    key = in_array(Runs.shard, shards_param()) if spanning else Runs.shard == shard_param()
    return (
        _select()
        .add_columns(last_seq)
        .where(key, in_array(Runs.id, uuid_array("run_ids")))
        .order_by(Runs.id)
        # NO KEY UPDATE: inserts of the run's tasks, signals and history (their foreign
        # keys take KEY SHARE on this row) need not wait for the decision.
        .with_for_update(of=Runs.table, key_share=True)
    )


async def lock_many(
    conn: AsyncConnection, shard: int, run_ids: Sequence[uuid.UUID]
) -> list[tuple[RunRow, int]]:
    """Lock runs' rows of key ``shard``, in run-id order, for the rest of the
    transaction, with each run's last history seq (decider loop). Every state
    transition of a run happens under this lock. Primary keys (shard, id) of the runs'
    partitions; the seq from ``run_events``' primary key (shard, run_id, seq).
    """
    result = await conn.execute(
        _lock_statement(False), {"run_ids": list(run_ids), "in_shard": shard}
    )
    return [(run_row(row[:-1]), row[-1]) for row in result]


async def lock_many_held(
    conn: AsyncConnection, keys: Sequence[int], run_ids: Sequence[uuid.UUID]
) -> list[tuple[RunRow, int]]:
    """:func:`lock_many` of runs of any of ``keys`` in ONE statement (decider loop of a
    single-node installation, a batch taken across its held keys): ``shard = ANY``
    over the batch's keys with the ids, each run's seq read in its own key. The same
    order and lock; the same primary keys."""
    result = await conn.execute(
        _lock_statement(True), {"run_ids": list(run_ids), "in_shards": list(keys)}
    )
    return [(run_row(row[:-1]), row[-1]) for row in result]


async def get(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> RunRow | None:
    """Read a run (Client.get_run, Client.result, signal/cancel checks). Primary key
    (shard, id)."""
    row = (await conn.execute(_select().where(Runs.shard == shard, Runs.id == run_id))).first()
    return None if row is None else run_row(row)


class Finish(NamedTuple):
    """A run's final status, as its last decision sets it."""

    run_id: uuid.UUID
    status: RunStatus
    output: JsonValue
    error: TaskError | None


_FINISHES = Unnest("finished", Finish, Runs, columns={"run_id": Runs.id})


@cache
def finished(spanning: bool = False) -> Update:
    """Move RUNNING runs of key ``:shard`` to their final status (``decisions.write``,
    under the runs' locks, bound by :func:`finished_params`). One UPDATE joined to
    ``unnest`` of array parameters for the batch (built once); primary keys (shard, id)
    of the runs' partitions."""
    return _FINISHES.update(
        Runs.shard == (run_shard(_FINISHES.value("run_id")) if spanning else shard_param()),
        in_array(Runs.id, uuid_array("fence_ids")),
        Runs.id == _FINISHES.value("run_id"),
        Runs.status == RunStatus.RUNNING,
        keys=("run_id",),
        finished_at=func.now(),
        updated_at=func.now(),
    )


def finished_params(shard: int, finishes: Sequence[Finish]) -> dict[str, Any]:
    return {
        **_FINISHES.bind(finishes),
        "fence_ids": sorted(f.run_id for f in finishes),
        "in_shard": shard,
    }


async def request_cancel(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID, now: datetime | None = None
) -> bool:
    """Flag a RUNNING run for cancellation (Client.cancel, decider for child runs); the
    first request's time (``now``, the caller's clock by default) is kept.

    Reports whether the run was running. Primary key (shard, id).
    """
    result = await conn.execute(
        update(Runs.table)
        .where(Runs.shard == shard, Runs.id == run_id, Runs.status == RunStatus.RUNNING)
        .values(
            cancel_requested_at=func.coalesce(
                Runs.cancel_requested_at,
                bindparam("now", now or datetime.now(UTC), type_=DateTime(timezone=True)),
            )
        )
        .returning(Runs.id)
    )
    return result.first() is not None


async def list_runs(
    conn: AsyncConnection,
    chosen: RunFilter,
    *,
    before: uuid.UUID | None,
    limit: int,
) -> list[RunRow]:
    """Fan-out across shard keys: runs newest first, keyset-paginated by id over every
    key (Client.list_runs, ``legato runs list``, and the pages of the bulk actions in
    ``legato.bulk``); never on a hot path.

    Served by ``ix_runs_workflow_name_id`` with a workflow filter, ``ix_runs_active``
    for RUNNING, else the primary keys of the newest partitions (a time range bounds
    the ids, so it prunes months); a node filter probes each run's attempts by the
    tasks' unique (shard, run_id, node_id, ...) index.
    """
    conditions = conditions_of(chosen)
    if before is not None:
        conditions.append(Runs.id < before)
    statement = _select().order_by(Runs.id.desc()).limit(limit)
    if conditions:
        statement = statement.where(and_(*conditions))
    return [run_row(row) for row in await conn.execute(fan_out(statement))]


async def count_runs(conn: AsyncConnection, chosen: RunFilter) -> int:
    """Fan-out across shard keys: how many runs ``chosen`` chooses (``legato runs
    cancel|rerun|resume`` by filter: the count a ``--dry-run`` prints and the
    confirmation asks about). The indexes of :func:`list_runs`."""
    statement = select(func.count()).select_from(Runs.table)
    conditions = conditions_of(chosen)
    if conditions:
        statement = statement.where(and_(*conditions))
    return int((await conn.execute(fan_out(statement))).scalar_one())
