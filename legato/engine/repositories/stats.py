"""Read-only figures about the queues, runs and connections: ``legato stats`` and the
metrics gauges.

Each query reads a partial index or a bounded range of the partitioned tables; none
takes a lock, so running them beside a busy system costs it nothing but the reads.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, cast, column, func, select, table
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import fan_out
from legato.schema import DecideQueue, Runs, RunStatus, TaskQueue, Tasks, TaskState
from legato.schema.types import uuid7_bound


@dataclass(frozen=True)
class Backlog:
    """Work ready now and not yet taken: how many items, and since when the oldest waits."""

    queue: str
    depth: int
    oldest: datetime | None

    def oldest_age(self, now: datetime) -> float:
        """Seconds the oldest item has waited (0 when there is none)."""
        return 0.0 if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


async def task_backlog(conn: AsyncConnection) -> list[Backlog]:
    """Fan-out across shard keys: attempts ready to be claimed per queue, with the oldest
    one's ``available_at`` (``legato stats``; the metrics gauge sampler every few seconds).
    Only unleased rows whose time has come: retries waiting out their back-off are not
    backlog. Served by the partial index ``ix_task_queue_dequeue`` (``lease_expires_at IS
    NULL``), whose leading column is the queue."""
    result = await conn.execute(
        fan_out(
            select(TaskQueue.queue, func.count(), func.min(TaskQueue.available_at))
            .where(TaskQueue.lease_expires_at.is_(None), TaskQueue.available_at <= func.now())
            .group_by(TaskQueue.queue)
            .order_by(TaskQueue.queue)
        )
    )
    return [Backlog(queue, int(depth), oldest) for queue, depth, oldest in result]


async def decide_backlog(conn: AsyncConnection) -> Backlog:
    """Fan-out across shard keys: runs due for a decision and the oldest one's
    ``available_at``, quarantined runs left out (``legato stats``; the metrics gauge
    sampler). Served by ``ix_decide_queue_decider`` (its predicate is the quarantine
    filter)."""
    result = await conn.execute(
        fan_out(
            select(func.count(), func.min(DecideQueue.available_at)).where(
                DecideQueue.available_at <= func.now(), DecideQueue.quarantined_at.is_(None)
            )
        )
    )
    depth, oldest = result.one()
    return Backlog("decide", int(depth), oldest)


async def quarantined_count(conn: AsyncConnection) -> int:
    """Fan-out across shard keys: how many runs are quarantined (``legato stats``). Served
    by ``ix_decide_queue_quarantined``."""
    result = await conn.execute(
        fan_out(select(func.count()).where(DecideQueue.quarantined_at.is_not(None)))
    )
    return int(result.scalar_one())


@dataclass(frozen=True)
class Leases:
    worker: str
    held: int
    next_expiry: datetime


async def leases_by_worker(conn: AsyncConnection) -> list[Leases]:
    """Fan-out across shard keys: attempts each worker holds, with its soonest lease expiry
    (``legato stats``). Served by the partial index ``ix_task_queue_leased`` (only leased
    rows)."""
    result = await conn.execute(
        fan_out(
            select(TaskQueue.lease_owner, func.count(), func.min(TaskQueue.lease_expires_at))
            .where(TaskQueue.lease_expires_at.is_not(None))
            .group_by(TaskQueue.lease_owner)
            .order_by(TaskQueue.lease_owner)
        )
    )
    return [Leases(str(owner), int(held), expiry) for owner, held, expiry in result]


async def running_runs(conn: AsyncConnection) -> int:
    """Fan-out across shard keys: how many runs are RUNNING, however old (``legato stats``).
    Served by the partial index ``ix_runs_active``."""
    result = await conn.execute(
        fan_out(
            select(func.count()).select_from(Runs.table).where(Runs.status == RunStatus.RUNNING)
        )
    )
    return int(result.scalar_one())


def since_id(window: timedelta) -> uuid.UUID:
    """The smallest run id created within ``window`` of now: a UUIDv7 bound that prunes
    the runs and tasks partitions to the window."""
    return uuid7_bound(int((time.time() - window.total_seconds()) * 1000))


async def runs_by_status(conn: AsyncConnection, window: timedelta) -> dict[RunStatus, int]:
    """Fan-out across shard keys: runs created within ``window`` by status (``legato
    stats``). The id range keeps the scan to the window's partitions, through their primary
    keys."""
    result = await conn.execute(
        fan_out(
            select(Runs.status, func.count())
            .where(Runs.id >= since_id(window))
            .group_by(Runs.status)
        )
    )
    return {status: int(count) for status, count in result}


@dataclass(frozen=True)
class Failures:
    workflow: str
    node: str
    error_type: str
    count: int


async def recent_failures(
    conn: AsyncConnection, finished_within: timedelta, window: timedelta
) -> list[Failures]:
    """Fan-out across shard keys: attempts that failed or timed out within
    ``finished_within`` (the last hour), by workflow, node and error type, among runs
    created within ``window`` (``legato stats``). The run-id range prunes ``tasks`` and
    ``runs`` to the window's partitions and is read through their primary keys; an attempt
    of an older run is not counted."""
    bound = since_id(window)
    error_type = cast(Tasks.error, JSONB)["type"].astext
    result = await conn.execute(
        fan_out(
            select(Runs.workflow_name, Tasks.node_id, error_type, func.count())
            .join(Runs.table, and_(Runs.shard == Tasks.shard, Runs.id == Tasks.run_id))
            .where(
                Tasks.run_id >= bound,
                Runs.id >= bound,
                Tasks.state.in_([TaskState.FAILED, TaskState.TIMED_OUT]),
                Tasks.finished_at >= func.now() - finished_within,
            )
            .group_by(Runs.workflow_name, Tasks.node_id, error_type)
            .order_by(func.count().desc(), Runs.workflow_name, Tasks.node_id)
        )
    )
    return [Failures(wf, node, str(kind), int(count)) for wf, node, kind, count in result]


@dataclass(frozen=True)
class Connections:
    """The server connections of one ``application_name`` to this database."""

    application: str
    total: int
    active: int  # running a statement now
    idle_in_transaction: int


_ACTIVITY = table(
    "pg_stat_activity",
    column("datname"),
    column("application_name"),
    column("state"),
    column("backend_type"),
    schema="pg_catalog",
)


async def connections_by_application(conn: AsyncConnection) -> list[Connections]:
    """The client connections to this database per ``application_name`` (``legato
    stats``): Legato's processes name themselves ``legato <command>`` (``legato worker``,
    ...) and ``legato`` in a host application, so this is what each kind holds. Reads
    ``pg_stat_activity`` (the server's in-memory view, no index, no lock); behind a
    transaction pooler it shows the pooler's server connections, not Legato's."""
    state = _ACTIVITY.c.state
    result = await conn.execute(
        select(
            _ACTIVITY.c.application_name,
            func.count(),
            func.count().filter(state == "active"),
            func.count().filter(
                state.in_(("idle in transaction", "idle in transaction (aborted)"))
            ),
        )
        .where(
            _ACTIVITY.c.datname == func.current_database(),
            _ACTIVITY.c.backend_type == "client backend",
        )
        .group_by(_ACTIVITY.c.application_name)
        .order_by(_ACTIVITY.c.application_name)
    )
    return [
        Connections(str(name), int(total), int(active), int(idle))
        for name, total, active, idle in result
    ]
