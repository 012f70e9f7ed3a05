"""The typed schema: every Legato table as SQLAlchemy Core, one class per table.

Each class is a namespace of typed ``Column`` objects bound to one ``Table``
(``Runs.status`` *is* ``Runs.table.c.status``), so a query built from
``select(Runs.status)`` is typed ``RunStatus`` and a misspelt column is a mypy
error rather than a runtime surprise. Tables live in the placeholder schema
``legato``; the real schema name is chosen per engine with
``schema_translate_map`` (``legato.db.create_engine``).

What Core cannot express (partitioned parents, partitions, storage parameters,
functions, triggers) is emitted as raw DDL by the migrations; the partial
indexes are declared here too so the drift test can compare them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    FetchedValue,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    Uuid,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.schema import SchemaItem

from legato.schema.enums import CatchUp, NodeKind, RunStatus, TaskState, TimerKind
from legato.schema.types import JSON_VALUE, PydanticJSONB, TextEnum
from legato.schema.values import TaskError

SCHEMA_PLACEHOLDER = "legato"

metadata = MetaData(
    schema=SCHEMA_PLACEHOLDER,
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)

ERROR_JSON: PydanticJSONB[TaskError] = PydanticJSONB(TaskError)


def _now() -> Any:
    return func.now()


def uuid_col(**kw: Any) -> Column[uuid.UUID]:
    return Column(Uuid(as_uuid=True), nullable=False, **kw)


def text_col(*, nullable: bool = False, **kw: Any) -> Column[str]:
    return Column(Text, nullable=nullable, **kw)


def int_col(*, default: int | None = None, **kw: Any) -> Column[int]:
    server_default = text(str(default)) if default is not None else None
    return Column(Integer, nullable=False, server_default=server_default, **kw)


def time_col(*, nullable: bool = True, now_default: bool = False) -> Column[datetime]:
    return Column(
        DateTime(timezone=True),
        nullable=nullable,
        server_default=_now() if now_default else None,
    )


def shard_col() -> Column[int]:
    """The run's shard key (``legato.schema.shards``): first in every run-scoped key."""
    return Column(SmallInteger, nullable=False)


def json_col(*, nullable: bool = True) -> Column[JsonValue]:
    return Column(JSON_VALUE, nullable=nullable)


def error_col() -> Column[TaskError]:
    return Column(ERROR_JSON, nullable=True)


def enum_col(enum_type: type[Any]) -> Column[Any]:
    return Column(TextEnum(enum_type), nullable=False)


def enum_check(column: str, enum_type: type[StrEnum]) -> CheckConstraint:
    """The CHECK constraint that keeps a TEXT state column inside its enum."""
    values = ", ".join(f"'{member.value}'" for member in enum_type)
    return CheckConstraint(f"{column} IN ({values})", name=f"{column}_valid")


class TableColumns:
    """A table's typed column namespace: each class attribute is a ``Column`` of the table.

    ``Runs.status`` *is* ``Runs.table.c.status``, typed ``Column[RunStatus]``, so a
    query built from ``select(Runs.status)`` is typed and a misspelt column is a mypy
    ``attr-defined`` error (``Table.c`` would accept any name).
    """

    table: Table

    def __init__(self, name: str, *args: SchemaItem, **kw: Any) -> None:
        columns: list[Column[Any]] = []
        for attr, value in vars(type(self)).items():
            if isinstance(value, Column):
                value.name = value.key = attr
                columns.append(value)
        self.table = Table(name, metadata, *columns, *args, **kw)
        for column in self.table.columns:
            setattr(self, column.key, column)


class WorkflowDefinitionsColumns(TableColumns):
    """Columns of ``workflow_definitions``."""

    name = text_col()
    version = int_col()
    spec = json_col(nullable=False)
    spec_hash = text_col()
    deployed: Column[bool] = Column(Boolean, nullable=False, server_default=false())
    created_at = time_col(nullable=False, now_default=True)
    deployed_at = time_col()


WorkflowDefinitions = WorkflowDefinitionsColumns(
    "workflow_definitions",
    PrimaryKeyConstraint("name", "version"),
    # One spec per hash per name: deploying an unchanged spec finds its version.
    Index(None, "name", "spec_hash", unique=True),
    # Client.start and the deploy step: the deployed version of a workflow.
    Index(None, "name", unique=True, postgresql_where=text("deployed")),
)
"""Compiled workflow specs, versioned; never physically deleted."""


class RunsColumns(TableColumns):
    """Columns of ``runs``."""

    id = uuid_col()
    workflow_name = text_col()
    workflow_version = int_col()
    status: Column[RunStatus] = enum_col(RunStatus)
    input = json_col()
    output = json_col()
    error = error_col()
    parent_run_id: Column[uuid.UUID | None] = Column(Uuid(as_uuid=True), nullable=True)
    idempotency_key = text_col(nullable=True)
    cancel_requested_at = time_col()
    created_at = time_col(nullable=False, now_default=True)
    scheduled_at = time_col()
    timed_out_at = time_col()  # the RUN_TIMEOUT timer fired (migration 0006)
    updated_at = time_col(nullable=False, now_default=True)
    finished_at = time_col()
    # W3C trace context of the Client.start caller (migration 0005); NULL without tracing.
    trace_context = json_col()
    shard = shard_col()  # migration 0011


Runs = RunsColumns(
    "runs",
    PrimaryKeyConstraint("shard", "id"),
    enum_check("status", RunStatus),
    ForeignKeyConstraint(
        ["workflow_name", "workflow_version"],
        ["workflow_definitions.name", "workflow_definitions.version"],
    ),
    # Client.list_runs (keyset by id within a workflow) and partitions.drop's active check.
    Index(None, "workflow_name", "id"),
    Index("ix_runs_active", "id", postgresql_where=text("status = 'RUNNING'")),
    postgresql_partition_by="RANGE (id)",
)
"""One row per run; PARTITION BY RANGE (id), monthly (the UUIDv7 encodes the month)."""


class TasksColumns(TableColumns):
    """Columns of ``tasks``."""

    run_id = uuid_col()
    id = uuid_col()
    node_id = text_col()
    iteration = int_col(default=0)
    attempt = int_col(default=1)
    kind: Column[NodeKind] = enum_col(NodeKind)
    state: Column[TaskState] = enum_col(TaskState)
    task_name = text_col(nullable=True)
    queue = text_col(nullable=True)
    input = json_col()
    output = json_col()
    error = error_col()
    event_name = text_col(nullable=True)
    observed: Column[bool] = Column(Boolean, nullable=False, server_default=false())
    created_at = time_col(nullable=False, now_default=True)
    available_at = time_col()
    started_at = time_col()
    finished_at = time_col()
    lease_owner = text_col(nullable=True)
    # The output came from the output cache: the body did not run.
    cached: Column[bool] = Column(Boolean, nullable=False, server_default=false())
    shard = shard_col()


Tasks = TasksColumns(
    "tasks",
    PrimaryKeyConstraint("shard", "run_id", "id"),
    enum_check("state", TaskState),
    enum_check("kind", NodeKind),
    ForeignKeyConstraint(["shard", "run_id"], ["runs.shard", "runs.id"], ondelete="CASCADE"),
    # The decider's snapshot load and the identity of an attempt: a retry is a new row.
    Index(None, "shard", "run_id", "node_id", "iteration", "attempt", unique=True),
    # Client.emit: the event waits currently open for a name (a handful of rows).
    Index(
        "ix_tasks_open_waits",
        "event_name",
        postgresql_where=text("state = 'WAITING' AND event_name IS NOT NULL"),
    ),
    postgresql_partition_by="RANGE (run_id)",
)
"""One row per attempt of a node; PARTITION BY RANGE (run_id), monthly."""


class SignalsColumns(TableColumns):
    """Columns of ``signals``."""

    run_id = uuid_col()
    # uuid7_v1(): uuidv7() on PostgreSQL 18 (set by the migration's DDL).
    id = uuid_col(server_default=FetchedValue())
    name = text_col()
    payload = json_col()
    created_at = time_col(nullable=False, now_default=True)
    consumed_at = time_col()
    consumed_by: Column[uuid.UUID | None] = Column(Uuid(as_uuid=True), nullable=True)
    shard = shard_col()


Signals = SignalsColumns(
    "signals",
    PrimaryKeyConstraint("shard", "run_id", "id"),
    ForeignKeyConstraint(["shard", "run_id"], ["runs.shard", "runs.id"], ondelete="CASCADE"),
    # The decider's snapshot: a run's unconsumed signals.
    Index(
        "ix_signals_pending",
        "shard",
        "run_id",
        "id",
        postgresql_where=text("consumed_at IS NULL"),
    ),
    postgresql_partition_by="RANGE (run_id)",
)
"""Signals sent to a run, buffered until a wait consumes them, oldest first."""


class RunEventsColumns(TableColumns):
    """Columns of ``run_events``."""

    run_id = uuid_col()
    seq: Column[int] = Column(BigInteger, nullable=False)
    type = text_col()
    node_id = text_col(nullable=True)
    iteration: Column[int | None] = Column(Integer, nullable=True)
    attempt: Column[int | None] = Column(Integer, nullable=True)
    data = json_col()
    created_at = time_col(nullable=False, now_default=True)
    shard = shard_col()


RunEvents = RunEventsColumns(
    "run_events",
    PrimaryKeyConstraint("shard", "run_id", "seq"),
    ForeignKeyConstraint(["shard", "run_id"], ["runs.shard", "runs.id"], ondelete="CASCADE"),
    postgresql_partition_by="RANGE (run_id)",
)
"""A run's history: (run_id, seq) gap-free, appended under the run's row lock."""


class DecideQueueColumns(TableColumns):
    """Columns of ``decide_queue``."""

    run_id = uuid_col()
    available_at = time_col(nullable=False, now_default=True)
    reason = text_col(nullable=True)
    failures = int_col(default=0)  # failed decisions in a row: the back-off's exponent
    last_error = text_col(nullable=True)
    quarantined_at = time_col()  # set after too many failures: out of the take until resumed
    shard = shard_col()


DecideQueue = DecideQueueColumns(
    "decide_queue",
    PrimaryKeyConstraint("shard", "run_id"),
    # The decider loop's take within one key: oldest available first, quarantined left out.
    Index(
        "ix_decide_queue_decider",
        "shard",
        "available_at",
        postgresql_where=text("quarantined_at IS NULL"),
    ),
    # `legato runs list --quarantined`.
    Index(
        "ix_decide_queue_quarantined",
        "quarantined_at",
        postgresql_where=text("quarantined_at IS NOT NULL"),
    ),
)
"""Runs with something new to decide; the primary key collapses many wake-ups into one."""


class TaskQueueColumns(TableColumns):
    """Columns of ``task_queue``."""

    queue = text_col()
    task_id = uuid_col()
    run_id = uuid_col()
    attempt = int_col()
    task_name = text_col()
    priority = int_col(default=0)
    available_at = time_col(nullable=False, now_default=True)
    lease_owner = text_col(nullable=True)
    lease_expires_at = time_col()
    shard = shard_col()


TaskQueue = TaskQueueColumns(
    "task_queue",
    PrimaryKeyConstraint("shard", "queue", "task_id"),
    # The worker loop's claim within one key: unleased rows only, so leased work leaves it.
    Index(
        "ix_task_queue_dequeue",
        "shard",
        "queue",
        text("priority DESC"),
        "available_at",
        postgresql_where=text("lease_expires_at IS NULL"),
    ),
    # The lease sweeper, within one key: leased rows by expiry.
    Index(
        "ix_task_queue_leased",
        "shard",
        "lease_expires_at",
        postgresql_where=text("lease_expires_at IS NOT NULL"),
    ),
    postgresql_partition_by="HASH (queue)",
)
"""The narrow queue workers claim from; PARTITION BY HASH (queue), 8 ways."""


class TimersColumns(TableColumns):
    """Columns of ``timers``."""

    fire_at = time_col(nullable=False)
    id = uuid_col()
    run_id = uuid_col()
    task_id = uuid_col()
    attempt = int_col()
    kind: Column[TimerKind] = enum_col(TimerKind)
    due_at = time_col(nullable=False)
    shard = shard_col()


Timers = TimersColumns(
    "timers",
    PrimaryKeyConstraint("shard", "fire_at", "id"),
    enum_check("kind", TimerKind),
    # The timer loop's claim within one key (due timers by fire time): the primary key.
    postgresql_partition_by="RANGE (fire_at)",
)
"""Sleeps, event timeouts and task timeouts; PARTITION BY RANGE (fire_at), daily."""


class IdempotencyKeysColumns(TableColumns):
    """Columns of ``idempotency_keys``."""

    namespace = text_col()
    key = text_col()
    run_id = uuid_col()
    created_at = time_col(nullable=False, now_default=True)
    expires_at = time_col(nullable=False)
    shard = shard_col()  # the start's key: Shards.of_key(shard_key or idempotency key)


IdempotencyKeys = IdempotencyKeysColumns(
    "idempotency_keys",
    PrimaryKeyConstraint("shard", "namespace", "key"),
    # The maintenance loop's pruning of expired keys.
    Index(None, "expires_at"),
)
"""Start idempotency; unpartitioned because a unique key on a partitioned table must
    include the partition key, which a (namespace, key) pair cannot."""


class WebhookEndpointsColumns(TableColumns):
    """Columns of ``webhook_endpoints``."""

    id: Column[int] = Column(BigInteger, Identity(always=False), nullable=False)
    url = text_col()
    secret = text_col()
    event_types: Column[list[str]] = Column(ARRAY(Text), nullable=False)
    workflows: Column[list[str] | None] = Column(ARRAY(Text), nullable=True)  # NULL: every one
    created_at = time_col(nullable=False, now_default=True)


WebhookEndpoints = WebhookEndpointsColumns("webhook_endpoints", PrimaryKeyConstraint("id"))
"""Where run lifecycle events are delivered: deployment configuration (URLs, secrets),
managed with ``legato webhooks add|list|remove``; a handful of rows, read whole."""


class OutboxColumns(TableColumns):
    """Columns of ``outbox``."""

    id: Column[int] = Column(BigInteger, Identity(always=False), nullable=False)
    event_id = uuid_col()
    endpoint_id: Column[int] = Column(BigInteger, nullable=False)
    run_id = uuid_col()
    workflow_name = text_col()
    event_type = text_col()
    payload = json_col()
    created_at = time_col(nullable=False, now_default=True)
    attempts = int_col(default=0)
    next_attempt_at = time_col(nullable=False, now_default=True)
    last_error = text_col(nullable=True)
    dead_lettered_at = time_col()
    shard = shard_col()


Outbox = OutboxColumns(
    "outbox",
    PrimaryKeyConstraint("shard", "id"),
    ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"], ondelete="CASCADE"),
    # The relay loop's claim within one key: due deliveries, oldest first; not dead letters.
    Index(
        "ix_outbox_relay_due",
        "shard",
        "next_attempt_at",
        postgresql_where=text("dead_lettered_at IS NULL"),
    ),
    # `legato outbox list`: the dead letter.
    Index(
        "ix_outbox_dead_letter",
        "dead_lettered_at",
        postgresql_where=text("dead_lettered_at IS NOT NULL"),
    ),
)
"""One row per delivery of a run lifecycle event to one endpoint, written in the
decision's transaction; deleted once delivered, kept as a dead letter after the relay's
attempt budget (docs/operations.md, "Outbox and webhooks")."""


class SchemaVersionColumns(TableColumns):
    """Columns of ``legato_version``."""

    version_num: Column[str] = Column(String(32), nullable=False)


SchemaVersion = SchemaVersionColumns(
    "legato_version",
    PrimaryKeyConstraint("version_num"),
)
"""Legato's own migration version table (never the host's ``alembic_version``)."""


class SchedulesColumns(TableColumns):
    """Columns of ``schedules`` (migration 0006)."""

    name = text_col()
    workflow_name = text_col()
    cron = text_col(nullable=True)
    interval_seconds: Column[float | None] = Column(Float, nullable=True)
    timezone = text_col()
    input = json_col()
    catch_up: Column[CatchUp] = enum_col(CatchUp)
    max_catch_up = int_col()
    grace_seconds: Column[float] = Column(Float, nullable=False)
    paused: Column[bool] = Column(Boolean, nullable=False, server_default=false())
    next_fire_at = time_col(nullable=False)
    last_tick_at = time_col()
    created_at = time_col(nullable=False, now_default=True)
    updated_at = time_col(nullable=False, now_default=True)


Schedules = SchedulesColumns(
    "schedules",
    PrimaryKeyConstraint("name"),
    enum_check("catch_up", CatchUp),
    CheckConstraint("(cron IS NULL) <> (interval_seconds IS NULL)", name="timing_valid"),
    # The schedule loop's claim: due, unpaused schedules by next fire.
    Index("ix_schedules_due", "next_fire_at", postgresql_where=text("NOT paused")),
    # Deploy: the schedules a workflow has.
    Index(None, "workflow_name"),
)
"""Cron and interval schedules; each row's next_fire_at is its next tick (SKIP LOCKED)."""


class ConcurrencySlotsColumns(TableColumns):
    """Columns of ``concurrency_slots``."""

    limit_name = text_col()
    key = text_col()
    slot = int_col()
    holder_task_id: Column[uuid.UUID | None] = Column(Uuid(as_uuid=True), nullable=True)
    holder_owner = text_col(nullable=True)
    # The holder's lease expiry while held (a slot is free once it passes, so a killed
    # worker's slot frees itself); the release time once released.
    expires_at = time_col(nullable=False, now_default=True)


ConcurrencySlots = ConcurrencySlotsColumns(
    "concurrency_slots",
    PrimaryKeyConstraint("limit_name", "key", "slot"),
    # Reports, lease extensions and releases free or extend the slots of their attempts.
    Index(
        "ix_concurrency_slots_holder",
        "holder_task_id",
        postgresql_where=text("holder_task_id IS NOT NULL"),
    ),
)
"""One row per unit of a concurrency limit (``slot`` < the limit); the claim locks a
    free row to lease an attempt counted against the limit."""


class RateBucketsColumns(TableColumns):
    """Columns of ``rate_buckets``."""

    limit_name = text_col()
    key = text_col()
    tokens: Column[float] = Column(Double(), nullable=False)
    updated_at = time_col(nullable=False, now_default=True)


RateBuckets = RateBucketsColumns(
    "rate_buckets",
    PrimaryKeyConstraint("limit_name", "key"),
)
"""A token bucket per rate-limit key: a narrow row updated by every limited claim."""


class TaskCacheColumns(TableColumns):
    """Columns of ``task_cache``."""

    task_name = text_col()
    key = text_col()
    output = json_col()
    created_at = time_col(nullable=False, now_default=True)
    expires_at = time_col(nullable=False)


TaskCache = TaskCacheColumns(
    "task_cache",
    PrimaryKeyConstraint("task_name", "key"),
    # The maintenance loop's pruning of expired entries.
    Index(None, "expires_at"),
)
"""Cached task outputs by (task name, input key), reused until ``expires_at``."""


class InstallationColumns(TableColumns):
    """Columns of ``installation`` (migration 0011): one row."""

    id: Column[bool] = Column(Boolean, nullable=False, server_default=text("true"))
    shard_count: Column[int] = Column(SmallInteger, nullable=False)
    created_at = time_col(nullable=False, now_default=True)


Installation = InstallationColumns(
    "installation",
    PrimaryKeyConstraint("id"),
    CheckConstraint("id", name="one_row"),
)
"""What was fixed when the schema was created: the number of shard keys. Read once by
every Client and Runtime at connect (``legato.db.check_database``)."""


class ShardOwnersColumns(TableColumns):
    """Columns of ``shard_owners`` (migration 0011)."""

    role = text_col()  # "decider", "timer", "sweeper", "relay", "worker:<queues>#<task digest>"
    owner = text_col()  # one loop of one process
    shards: Column[list[int]] = Column(ARRAY(SmallInteger), nullable=False)
    expires_at = time_col(nullable=False)


ShardOwners = ShardOwnersColumns(
    "shard_owners",
    PrimaryKeyConstraint("role", "owner"),
)
"""Which loop holds which shard keys, per role, under an expiring lease: a row is a
live member of its role; the keys are shared out fairly among a role's members
(``legato.engine.shard_share``). A lease routes work, it never guards it: the row locks
of the queues keep two holders of one key from doing the same work twice."""
