"""Initial schema: every table, partitioned parents, partitions, functions, trigger.

Tables and indexes are declared with Alembic ops (the compiler quotes every
identifier); what Core cannot express is raw DDL in ``ddl_0001``.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.alembic import ddl_0001
from legato.db.server_check import check_server_version
from legato.migrations import migration_schema, record_revision

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("legato",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    check_server_version(op.get_bind())  # a host's Alembic environment does not run ours
    schema = migration_schema()
    # ``legato db`` creates the schema first; a host's Alembic environment does not.
    op.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
    op.create_table(
        "decide_queue",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_decide_queue")),
        schema=schema,
    )
    op.create_index(
        op.f("ix_decide_queue_available_at"),
        "decide_queue",
        ["available_at"],
        unique=False,
        schema=schema,
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "key", name=op.f("pk_idempotency_keys")),
        schema=schema,
    )
    op.create_index(
        op.f("ix_idempotency_keys_expires_at"),
        "idempotency_keys",
        ["expires_at"],
        unique=False,
        schema=schema,
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        schema=schema,
    )
    op.create_index(
        "ix_outbox_dead_letter",
        "outbox",
        ["dead_lettered_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("dead_lettered_at IS NOT NULL"),
    )
    op.create_index(
        "ix_outbox_deliverable",
        "outbox",
        ["next_attempt_at", "id"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("published_at IS NULL AND dead_lettered_at IS NULL"),
    )
    op.create_table(
        "task_queue",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("task_name", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("queue", "task_id", name=op.f("pk_task_queue")),
        schema=schema,
        postgresql_partition_by="HASH (queue)",
    )
    op.create_index(
        "ix_task_queue_dequeue",
        "task_queue",
        ["queue", sa.literal_column("priority DESC"), "available_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("lease_expires_at IS NULL"),
    )
    op.create_index(
        "ix_task_queue_leased",
        "task_queue",
        ["lease_expires_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("lease_expires_at IS NOT NULL"),
    )
    op.create_table(
        "timers",
        sa.Column("fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "kind IN ('SLEEP', 'EVENT_TIMEOUT', 'SCHEDULE_TO_START', 'START_TO_CLOSE')",
            name=op.f("ck_timers_kind_valid"),
        ),
        sa.PrimaryKeyConstraint("fire_at", "id", name=op.f("pk_timers")),
        schema=schema,
        postgresql_partition_by="RANGE (fire_at)",
    )
    op.create_index(
        "ix_timers_unclaimed",
        "timers",
        ["fire_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("claimed_at IS NULL"),
    )
    op.create_table(
        "workflow_definitions",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", postgresql.JSONB(), nullable=False),
        sa.Column("spec_hash", sa.Text(), nullable=False),
        sa.Column("deployed", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deployed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", "version", name=op.f("pk_workflow_definitions")),
        schema=schema,
    )
    op.create_index(
        op.f("ix_workflow_definitions_name"),
        "workflow_definitions",
        ["name"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("deployed"),
    )
    op.create_index(
        op.f("ix_workflow_definitions_name_spec_hash"),
        "workflow_definitions",
        ["name", "spec_hash"],
        unique=True,
        schema=schema,
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workflow_name", sa.Text(), nullable=False),
        sa.Column("workflow_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("input", postgresql.JSONB(), nullable=True),
        sa.Column("output", postgresql.JSONB(), nullable=True),
        sa.Column("error", postgresql.JSONB(), nullable=True),
        sa.Column("parent_run_id", sa.Uuid(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')",
            name=op.f("ck_runs_status_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["workflow_name", "workflow_version"],
            [f"{schema}.workflow_definitions.name", f"{schema}.workflow_definitions.version"],
            name=op.f("fk_runs_workflow_name_workflow_version_workflow_definitions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        schema=schema,
        postgresql_partition_by="RANGE (id)",
    )
    op.create_index(
        "ix_runs_active",
        "runs",
        ["id"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.create_index(
        op.f("ix_runs_workflow_name_id"),
        "runs",
        ["workflow_name", "id"],
        unique=False,
        schema=schema,
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("data", postgresql.JSONB(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            [f"{schema}.runs.id"],
            name=op.f("fk_run_events_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_run_events")),
        schema=schema,
        postgresql_partition_by="RANGE (run_id)",
    )
    op.create_table(
        "signals",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consumed_by", sa.Uuid(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            [f"{schema}.runs.id"],
            name=op.f("fk_signals_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "id", name=op.f("pk_signals")),
        schema=schema,
        postgresql_partition_by="RANGE (run_id)",
    )
    op.create_index(
        "ix_signals_pending",
        "signals",
        ["run_id", "id"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("consumed_at IS NULL"),
    )
    op.create_table(
        "tasks",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("iteration", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("task_name", sa.Text(), nullable=True),
        sa.Column("queue", sa.Text(), nullable=True),
        sa.Column("input", postgresql.JSONB(), nullable=True),
        sa.Column("output", postgresql.JSONB(), nullable=True),
        sa.Column("error", postgresql.JSONB(), nullable=True),
        sa.Column("event_name", sa.Text(), nullable=True),
        sa.Column("observed", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('TASK', 'SLEEP', 'EVENT', 'SWITCH', 'MAP', 'CHILD', 'JOIN', 'HANDLER')",
            name=op.f("ck_tasks_kind_valid"),
        ),
        sa.CheckConstraint(
            "state IN ('QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'TIMED_OUT', "
            "'CANCELLED', 'SKIPPED')",
            name=op.f("ck_tasks_state_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], [f"{schema}.runs.id"], name=op.f("fk_tasks_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "id", name=op.f("pk_tasks")),
        schema=schema,
        postgresql_partition_by="RANGE (run_id)",
    )
    op.create_index(
        "ix_tasks_open_waits",
        "tasks",
        ["event_name"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("state = 'WAITING' AND event_name IS NOT NULL"),
    )
    op.create_index(
        op.f("ix_tasks_run_id_node_id_iteration_attempt"),
        "tasks",
        ["run_id", "node_id", "iteration", "attempt"],
        unique=True,
        schema=schema,
    )
    ddl_0001.upgrade(schema)
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    ddl_0001.downgrade(schema)
    op.drop_index(
        op.f("ix_tasks_run_id_node_id_iteration_attempt"), table_name="tasks", schema=schema
    )
    op.drop_index(
        "ix_tasks_open_waits",
        table_name="tasks",
        schema=schema,
        postgresql_where=sa.text("state = 'WAITING' AND event_name IS NOT NULL"),
    )
    op.drop_table("tasks", schema=schema)
    op.drop_index(
        "ix_signals_pending",
        table_name="signals",
        schema=schema,
        postgresql_where=sa.text("consumed_at IS NULL"),
    )
    op.drop_table("signals", schema=schema)
    op.drop_table("run_events", schema=schema)
    op.drop_index(op.f("ix_runs_workflow_name_id"), table_name="runs", schema=schema)
    op.drop_index(
        "ix_runs_active",
        table_name="runs",
        schema=schema,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.drop_table("runs", schema=schema)
    op.drop_index(
        op.f("ix_workflow_definitions_name_spec_hash"),
        table_name="workflow_definitions",
        schema=schema,
    )
    op.drop_index(
        op.f("ix_workflow_definitions_name"),
        table_name="workflow_definitions",
        schema=schema,
        postgresql_where=sa.text("deployed"),
    )
    op.drop_table("workflow_definitions", schema=schema)
    op.drop_index(
        "ix_timers_unclaimed",
        table_name="timers",
        schema=schema,
        postgresql_where=sa.text("claimed_at IS NULL"),
    )
    op.drop_table("timers", schema=schema)
    op.drop_index(
        "ix_task_queue_leased",
        table_name="task_queue",
        schema=schema,
        postgresql_where=sa.text("lease_expires_at IS NOT NULL"),
    )
    op.drop_index(
        "ix_task_queue_dequeue",
        table_name="task_queue",
        schema=schema,
        postgresql_where=sa.text("lease_expires_at IS NULL"),
    )
    op.drop_table("task_queue", schema=schema)
    op.drop_index(
        "ix_outbox_deliverable",
        table_name="outbox",
        schema=schema,
        postgresql_where=sa.text("published_at IS NULL AND dead_lettered_at IS NULL"),
    )
    op.drop_index(
        "ix_outbox_dead_letter",
        table_name="outbox",
        schema=schema,
        postgresql_where=sa.text("dead_lettered_at IS NOT NULL"),
    )
    op.drop_table("outbox", schema=schema)
    op.drop_index(
        op.f("ix_idempotency_keys_expires_at"), table_name="idempotency_keys", schema=schema
    )
    op.drop_table("idempotency_keys", schema=schema)
    op.drop_index(op.f("ix_decide_queue_available_at"), table_name="decide_queue", schema=schema)
    op.drop_table("decide_queue", schema=schema)
    record_revision(down_revision)
