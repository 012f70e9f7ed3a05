"""The tables of a run's progress: the specs it runs (``workflow_definitions``), the
run, its node attempts, signals and history, the decide and task queues, its timers
and the start idempotency keys."""

from __future__ import annotations

import uuid

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    FetchedValue,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Uuid,
    false,
    text,
)

from legato.schema.columns import (
    TableColumns,
    enum_check,
    enum_col,
    error_col,
    int_col,
    json_col,
    shard_col,
    text_col,
    time_col,
    uuid_col,
)
from legato.schema.enums import NodeKind, RunStatus, TaskState, TimerKind


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
    # The run this one reruns (Client.rerun, migration 0012); in the same key.
    rerun_of: Column[uuid.UUID | None] = Column(Uuid(as_uuid=True), nullable=True)
    # Started from SQL (migration 0013): the decider validates the input on the first decision.
    input_unchecked: Column[bool] = Column(
        Boolean,
        nullable=False,
        server_default=false(),
        comment="started from SQL: the decider validates the input on the first decision",
    )


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
    # A run's reruns (runs show, Client.rerun, bulk rerun's skip), within its key.
    Index("ix_runs_rerun_of", "shard", "rerun_of", postgresql_where=text("rerun_of IS NOT NULL")),
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
    # No foreign key onto runs (migration 0016, docs/design.md): a signal is inserted
    # only for the RUNNING run its statement selected.
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
    # No foreign key onto runs (migration 0016, docs/design.md): an event is written
    # with its run's insert or under its row lock.
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
    # A fair queue's rows (``FairShare``, migration 0017): the attempt's key ('' for a
    # task of the queue without one) and weight; NULL on every other queue.
    fair_key = text_col(nullable=True)
    fair_weight = Column(Integer, nullable=True)


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
    # The worker loop's fair claim within one key and queue: the distinct waiting keys
    # (a loose index scan), then each key's best rows. Only fair queues' rows enter it.
    Index(
        "ix_task_queue_fair",
        "shard",
        "queue",
        "fair_key",
        text("priority DESC"),
        "available_at",
        postgresql_where=text("lease_expires_at IS NULL AND fair_key IS NOT NULL"),
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


class DebouncesColumns(TableColumns):
    """Columns of ``debounces`` (migration 0014)."""

    namespace = text_col()  # the workflow's name
    key = text_col()
    run_id = uuid_col()  # the run the window starts; replaced while it is pending
    first_at = time_col(nullable=False)  # the window's first call: max_wait counts from it
    expires_at = time_col(nullable=False)
    shard = shard_col()  # the start's key: Shards.of_key(shard_key or debounce key)


Debounces = DebouncesColumns(
    "debounces",
    PrimaryKeyConstraint("shard", "namespace", "key"),
    # The maintenance loop's pruning of closed windows.
    Index(None, "expires_at"),
)
"""The open debounce window of each (workflow, key): calls in it replace the pending
run's input; unpartitioned, like ``idempotency_keys``, for its unique key."""


class RunProgressColumns(TableColumns):
    """Columns of ``run_progress`` (migration 0015)."""

    run_id = uuid_col()
    seq: Column[int] = Column(BigInteger, nullable=False)  # gap-free per run, from 1
    task_id = uuid_col()
    node_id = text_col()
    iteration: Column[int] = Column(Integer, nullable=False)
    attempt: Column[int] = Column(Integer, nullable=False)
    kind = text_col()  # "progress" (ctx.progress) or "text" (ctx.stream)
    value = json_col(nullable=False)
    created_at = time_col(nullable=False, now_default=True)
    shard = shard_col()


RunProgress = RunProgressColumns(
    "run_progress",
    # Client.stream's read after a cursor and the append's next seq: the primary key.
    PrimaryKeyConstraint("shard", "run_id", "seq"),
    ForeignKeyConstraint(["shard", "run_id"], ["runs.shard", "runs.id"], ondelete="CASCADE"),
    postgresql_partition_by="RANGE (run_id)",
)
"""What running tasks report (``ctx.progress`` / ``ctx.stream``): partitioned by month
like ``run_events``, so retention drops it with the run's history."""
