"""``runs``: one row per run, partitioned monthly by its UUIDv7 id.

Every statement filters on the run id (one partition) except the listing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    BigInteger,
    Row,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import TaskError
from legato.engine.repositories.params import (
    in_array,
    int_array,
    rows_of,
    text_array,
    time_array,
    uuid_array,
)
from legato.schema import DecideQueue, RunEvents, Runs, RunStatus
from legato.schema.tables import ERROR_JSON
from legato.schema.types import JSON_VALUE


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
]


def _select() -> Select[*_RunColumns]:
    return select(
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
    )


def _row(row: Row[*_RunColumns]) -> RunRow:
    run_id, name, version, status, input_, output, error, parent, cancel, created, finished = row[
        :11
    ]
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
        timed_out=row[11] is not None,
    )


@dataclass(frozen=True)
class NewRun:
    run_id: uuid.UUID
    workflow_name: str
    workflow_version: int
    input: JsonValue
    parent_run_id: uuid.UUID | None = None
    idempotency_key: str | None = None
    scheduled_at: datetime | None = None
    trace_context: JsonValue = None


@cache
def _start_statement() -> Select[str]:
    given = rows_of(
        "given",
        id=uuid_array("ids"),
        workflow_name=text_array("names"),
        workflow_version=int_array("versions"),
        input=text_array("inputs"),
        parent_run_id=uuid_array("parents"),
        idempotency_key=text_array("keys"),
        scheduled_at=time_array("scheduled"),
        trace_context=text_array("traces"),
    )
    inserted = (
        insert(Runs.table)
        .from_select(
            [
                "id",
                "workflow_name",
                "workflow_version",
                "status",
                "input",
                "parent_run_id",
                "idempotency_key",
                "scheduled_at",
                "trace_context",
            ],
            select(
                given.c.id,
                given.c.workflow_name,
                given.c.workflow_version,
                literal(RunStatus.RUNNING.value, Text()),
                cast(given.c.input, JSONB),
                given.c.parent_run_id,
                given.c.idempotency_key,
                given.c.scheduled_at,
                cast(given.c.trace_context, JSONB),
            ),
        )
        .returning(Runs.id, Runs.scheduled_at)
        .cte("started")
    )
    history = insert(RunEvents.table).from_select(
        ["run_id", "seq", "type"],
        select(inserted.c.id, literal(1, BigInteger()), literal("run_started", Text())),
    )
    queued = insert(DecideQueue.table).from_select(
        ["run_id", "reason", "available_at"],
        select(
            inserted.c.id,
            bindparam("reason", type_=Text()),
            func.coalesce(inserted.c.scheduled_at, func.now()),
        ).order_by(inserted.c.id),
    )
    return select(inserted.c.id).add_cte(history.cte("history"), queued.cte("queued"))


async def start_runs(conn: AsyncConnection, new_runs: Sequence[NewRun], reason: str) -> None:
    """Start runs in ONE statement (Client.start / start_many, and the decider for child
    runs): insert the RUNNING runs, their first history event and their decide_queue
    rows (available at ``scheduled_at`` or now); the decide_queue trigger NOTIFYs the
    deciders.

    A single statement is atomic on its own, so a start outside a transaction is one
    round trip. Data-modifying CTEs over ``unnest`` of array parameters: one shape for
    any number of runs, built once. Primary keys of ``runs``, ``run_events`` and
    ``decide_queue``.
    """
    if not new_runs:
        return
    await conn.execute(
        _start_statement(),
        {
            "ids": [r.run_id for r in new_runs],
            "names": [r.workflow_name for r in new_runs],
            "versions": [r.workflow_version for r in new_runs],
            "inputs": [JSON_VALUE.dump_text(r.input) for r in new_runs],
            "parents": [r.parent_run_id for r in new_runs],
            "keys": [r.idempotency_key for r in new_runs],
            "scheduled": [r.scheduled_at for r in new_runs],
            "traces": [JSON_VALUE.dump_text(r.trace_context) for r in new_runs],
            "reason": reason,
        },
    )


@cache
def _lock_statement() -> Select[Any]:
    last_seq = (
        select(func.coalesce(func.max(RunEvents.seq), 0))
        .where(RunEvents.run_id == Runs.id)
        .scalar_subquery()
    )
    return (
        _select()
        .add_columns(last_seq)
        .where(in_array(Runs.id, uuid_array("run_ids")))
        .order_by(Runs.id)
        # NO KEY UPDATE: inserts of the run's tasks, signals and history (their foreign
        # keys take KEY SHARE on this row) need not wait for the decision.
        .with_for_update(of=Runs.table, key_share=True)
    )


async def lock_many(
    conn: AsyncConnection, run_ids: Sequence[uuid.UUID]
) -> list[tuple[RunRow, int]]:
    """Lock runs' rows, in run-id order, for the rest of the transaction, with each run's
    last history seq (decider loop). Every state transition of a run happens under this
    lock. Primary keys of the runs' partitions; the seq from ``run_events``' primary key.
    """
    result = await conn.execute(_lock_statement(), {"run_ids": list(run_ids)})
    return [(_row(row[:12]), int(row[12])) for row in result]


async def get(conn: AsyncConnection, run_id: uuid.UUID) -> RunRow | None:
    """Read a run (Client.get_run, Client.result, signal/cancel checks). Primary key."""
    row = (await conn.execute(_select().where(Runs.id == run_id))).first()
    return None if row is None else _row(row)


@dataclass(frozen=True)
class Finish:
    run_id: uuid.UUID
    status: RunStatus
    output: JsonValue
    error: TaskError | None


async def finish_many(conn: AsyncConnection, finishes: Sequence[Finish]) -> None:
    """Move RUNNING runs to their final status (decider loop, under the runs' locks).

    One UPDATE joined to ``unnest`` of array parameters for the batch (built once);
    primary keys of the runs' partitions.
    """
    if not finishes:
        return
    await conn.execute(
        _finish_statement(),
        {
            "ids": [f.run_id for f in finishes],
            "statuses": [f.status.value for f in finishes],
            "outputs": [JSON_VALUE.dump_text(f.output) for f in finishes],
            "errors": [ERROR_JSON.dump_text(f.error) for f in finishes],
            "fence_ids": sorted(f.run_id for f in finishes),
        },
    )


@cache
def _finish_statement() -> Any:
    finished = rows_of(
        "finished",
        id=uuid_array("ids"),
        status=text_array("statuses"),
        output=text_array("outputs"),
        error=text_array("errors"),
    )
    return (
        update(Runs.table)
        .where(
            in_array(Runs.id, uuid_array("fence_ids")),
            Runs.id == finished.c.id,
            Runs.status == RunStatus.RUNNING,
        )
        .values(
            status=finished.c.status,
            output=cast(finished.c.output, JSONB),
            error=cast(finished.c.error, JSONB),
            finished_at=func.now(),
            updated_at=func.now(),
        )
    )


async def request_cancel(conn: AsyncConnection, run_id: uuid.UUID) -> bool:
    """Flag a RUNNING run for cancellation (Client.cancel, decider for child runs).

    Reports whether the run was running. Primary key.
    """
    result = await conn.execute(
        update(Runs.table)
        .where(Runs.id == run_id, Runs.status == RunStatus.RUNNING)
        .values(cancel_requested_at=func.coalesce(Runs.cancel_requested_at, func.now()))
        .returning(Runs.id)
    )
    return result.first() is not None


async def list_runs(
    conn: AsyncConnection,
    *,
    workflow_name: str | None,
    status: RunStatus | None,
    before: uuid.UUID | None,
    limit: int,
) -> list[RunRow]:
    """Runs newest first, keyset-paginated by id (Client.list_runs, ``legato runs list``).

    Served by ``ix_runs_workflow_name_id`` with a workflow filter, ``ix_runs_active``
    for RUNNING, else the primary keys of the newest partitions.
    """
    conditions = []
    if workflow_name is not None:
        conditions.append(Runs.workflow_name == workflow_name)
    if status is not None:
        conditions.append(Runs.status == status)
    if before is not None:
        conditions.append(Runs.id < before)
    statement = _select().order_by(Runs.id.desc()).limit(limit)
    if conditions:
        statement = statement.where(and_(*conditions))
    return [_row(row) for row in await conn.execute(statement)]
