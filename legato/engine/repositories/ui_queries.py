"""Read-only queries of ``legato ui`` (``legato.ui``) that the Client API does not have.

The dashboard never counts all rows of a partitioned table: the runs list is a keyset
page over ``runs`` (its time range is an id range, since a UUIDv7 encodes its creation
time, so only the partitions of that range are read); counts are taken only of the
running runs (``ix_runs_active``) and of the queue tables, which hold only pending work.

A run's page reads within the run's shard key (the ``shard`` argument); the lists and
counts are fan-outs across keys, never on a hot path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import run_filters
from legato.engine.repositories.params import fan_out, in_array, uuid_array
from legato.engine.repositories.tasks import TASK_ROW_COLUMNS, TaskRow
from legato.models import RunFilter
from legato.schema import (
    DecideQueue,
    IdempotencyKeys,
    Installation,
    Runs,
    RunStatus,
    TaskQueue,
    Tasks,
    WorkflowDefinitions,
)


@dataclass(frozen=True)
class RunListRow:
    id: uuid.UUID
    workflow_name: str
    workflow_version: int
    status: RunStatus
    idempotency_key: str | None
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None
    parent_run_id: uuid.UUID | None
    quarantined: bool


@dataclass(frozen=True)
class RunQuery:
    """A runs-list filter: the runs ``chosen`` picks (the criteria of ``Client.list_runs``),
    among ``ids`` when the search box names some."""

    chosen: RunFilter = field(default_factory=RunFilter)
    ids: tuple[uuid.UUID, ...] | None = None


async def list_runs(
    conn: AsyncConnection, query: RunQuery, before: uuid.UUID | None, limit: int
) -> list[RunListRow]:
    """Fan-out across shard keys: runs newest first, keyset-paginated by id over every key,
    each with its parent and whether it is quarantined (the dashboard's runs list).

    Its criteria are those of ``runs.list_runs`` (``run_filters.conditions_of``) and so are its
    indexes: ``ix_runs_workflow_name_id`` with a workflow filter, ``ix_runs_active`` for
    RUNNING, else the primary keys of the partitions inside the id range, a node filter
    probing each run's attempts by the tasks' unique index; each page's rows are joined
    to ``decide_queue`` through its primary key."""
    conditions = run_filters.conditions_of(query.chosen)
    if query.ids is not None:
        conditions.append(in_array(Runs.id, uuid_array("ids", query.ids)))
    if before is not None:
        conditions.append(Runs.id < before)
    statement = (
        select(
            Runs.id,
            Runs.workflow_name,
            Runs.workflow_version,
            Runs.status,
            Runs.idempotency_key,
            Runs.cancel_requested_at.is_not(None),
            Runs.created_at,
            Runs.finished_at,
            Runs.parent_run_id,
            DecideQueue.quarantined_at.is_not(None),
        )
        .select_from(Runs.table)
        .outerjoin(
            DecideQueue.table,
            and_(DecideQueue.shard == Runs.shard, DecideQueue.run_id == Runs.id),
        )
        .where(and_(True, *conditions))
        .order_by(Runs.id.desc())
        .limit(limit)
    )
    return [RunListRow(*tuple(row)) for row in await conn.execute(fan_out(statement))]


async def runs_with_key(conn: AsyncConnection, key: str) -> list[uuid.UUID]:
    """Fan-out across shard keys: the runs started with idempotency key ``key`` in any
    workflow and any key (the dashboard's search box). Keys are namespaced by workflow name,
    so this looks the key up once per workflow name: primary key of ``idempotency_keys``
    (names from ``workflow_definitions``' primary key). Keys past their retention are
    gone."""
    names = select(WorkflowDefinitions.name).distinct().scalar_subquery()
    # Every key, named, so the lookup stays on the primary key (shard, namespace, key).
    every_key = select(func.generate_series(0, Installation.shard_count - 1)).scalar_subquery()
    result = await conn.execute(
        fan_out(
            select(IdempotencyKeys.run_id).where(
                IdempotencyKeys.shard.in_(every_key),
                IdempotencyKeys.namespace.in_(names),
                IdempotencyKeys.key == key,
            )
        )
    )
    return list(result.scalars())


@dataclass(frozen=True)
class Attempt(TaskRow):
    """An attempt as the run page shows it: the repository's row plus its input and the
    worker holding its lease."""

    input: JsonValue
    lease_owner: str | None


async def attempts(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> list[Attempt]:
    """Every attempt of a run with its input, in creation order (the dashboard's run
    page; ``Client.get_run`` leaves inputs out). Served by the unique index (shard,
    run_id, node_id, iteration, attempt) in the run's partition."""
    result = await conn.execute(
        select(*TASK_ROW_COLUMNS, Tasks.input, Tasks.lease_owner)
        .where(Tasks.shard == shard, Tasks.run_id == run_id)
        .order_by(Tasks.created_at, Tasks.node_id, Tasks.iteration, Tasks.attempt)
    )
    return [Attempt(*tuple(row)) for row in result]


async def task_payload(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID, task_id: uuid.UUID
) -> tuple[JsonValue, JsonValue] | None:
    """One attempt's input and output, in full (the dashboard's "show all" of a
    truncated payload). Primary key of the run's ``tasks`` partition."""
    row = (
        await conn.execute(
            select(Tasks.input, Tasks.output).where(
                Tasks.shard == shard, Tasks.run_id == run_id, Tasks.id == task_id
            )
        )
    ).first()
    return None if row is None else (row[0], row[1])


@dataclass(frozen=True)
class VersionRow:
    name: str
    version: int
    deployed: bool
    created_at: datetime
    deployed_at: datetime | None
    running: int


async def workflow_versions(conn: AsyncConnection) -> list[VersionRow]:
    """Fan-out across shard keys: every stored workflow version with its count of runs in
    flight over every key (the dashboard's workflows page). ``workflow_definitions`` is
    small (one row per version); the counts read only running runs, through
    ``ix_runs_active``."""
    running = (
        select(Runs.workflow_name, Runs.workflow_version, func.count().label("running"))
        .where(Runs.status == RunStatus.RUNNING)
        .group_by(Runs.workflow_name, Runs.workflow_version)
        .subquery()
    )
    result = await conn.execute(
        fan_out(
            select(
                WorkflowDefinitions.name,
                WorkflowDefinitions.version,
                WorkflowDefinitions.deployed,
                WorkflowDefinitions.created_at,
                WorkflowDefinitions.deployed_at,
                func.coalesce(running.c.running, 0),
            )
            .outerjoin(
                running,
                and_(
                    running.c.workflow_name == WorkflowDefinitions.name,
                    running.c.workflow_version == WorkflowDefinitions.version,
                ),
            )
            .order_by(WorkflowDefinitions.name, WorkflowDefinitions.version.desc())
        )
    )
    return [VersionRow(*row) for row in result]


@dataclass(frozen=True)
class QueueRow:
    """One queue's waiting work, or one worker's leases on it (``lease_owner`` set)."""

    queue: str
    lease_owner: str | None
    tasks: int
    oldest_available_at: datetime | None


async def task_queues(conn: AsyncConnection) -> list[QueueRow]:
    """Fan-out across shard keys: per queue, unleased attempts and the oldest of them, and
    leased attempts per worker, over every key (the dashboard's queues page). ``task_queue``
    holds only pending attempts; one scan of its partitions."""
    result = await conn.execute(
        fan_out(
            select(
                TaskQueue.queue,
                TaskQueue.lease_owner,
                func.count(),
                func.min(TaskQueue.available_at),
            )
            .group_by(TaskQueue.queue, TaskQueue.lease_owner)
            .order_by(TaskQueue.queue, TaskQueue.lease_owner.nulls_first())
        )
    )
    return [QueueRow(*row) for row in result]


@dataclass(frozen=True)
class Quarantine:
    failures: int
    quarantined_at: datetime
    last_error: str | None


async def quarantine_of(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> Quarantine | None:
    """Whether a run is quarantined, since when and why (the dashboard's run page).
    Primary key of ``decide_queue``."""
    row = (
        await conn.execute(
            select(DecideQueue.failures, DecideQueue.quarantined_at, DecideQueue.last_error).where(
                DecideQueue.shard == shard,
                DecideQueue.run_id == run_id,
                DecideQueue.quarantined_at.is_not(None),
            )
        )
    ).first()
    return None if row is None else Quarantine(*row)
