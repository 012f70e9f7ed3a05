"""The tables of the installation beside the runs' own: webhook endpoints and the
outbox, the schema version, schedules, the limits' concurrency slots and rate
buckets, the task output cache, the installation row and the shard owners."""

from __future__ import annotations

import uuid

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    Uuid,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

from legato.schema.columns import (
    TableColumns,
    enum_check,
    enum_col,
    int_col,
    json_col,
    shard_col,
    text_col,
    time_col,
    uuid_col,
)
from legato.schema.enums import CatchUp


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
every Client and Runtime at connect (``legato.db.server_check.check_database``)."""


class DeciderSleepColumns(TableColumns):
    """Columns of ``decider_sleep`` (migration 0018)."""

    shard = shard_col()
    asleep: Column[bool] = Column(Boolean, nullable=False, server_default=false())


DeciderSleep = DeciderSleepColumns(
    "decider_sleep",
    PrimaryKeyConstraint("shard"),
)
"""Per shard key, whether a decider holding it sleeps on LISTEN: set by the decider
before it sleeps, cleared by the first writer of the key's decide_queue rows, whose
trigger then NOTIFYs; while it is clear no writer notifies (docs/design.md, "A NOTIFY
only for a sleeping decider")."""


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
