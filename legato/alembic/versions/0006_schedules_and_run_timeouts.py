"""Schedules and run timeouts: the ``schedules`` table, ``runs.timed_out_at``, the
TIMED_OUT run status and the RUN_TIMEOUT timer kind.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.migrations import migration_schema, record_revision

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RUN_STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
_TIMER_KINDS = ("SLEEP", "EVENT_TIMEOUT", "SCHEDULE_TO_START", "START_TO_CLOSE")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _replace_check(table: str, column: str, values: Sequence[str], schema: str) -> None:
    name = op.f(f"ck_{table}_{column}_valid")
    op.drop_constraint(name, table, type_="check", schema=schema)
    op.create_check_constraint(name, table, _in(column, values), schema=schema)


def upgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "runs", sa.Column("timed_out_at", sa.DateTime(timezone=True), nullable=True), schema=schema
    )
    _replace_check("runs", "status", (*_RUN_STATUSES, "TIMED_OUT"), schema)
    _replace_check("timers", "kind", (*_TIMER_KINDS, "RUN_TIMEOUT"), schema)
    op.create_table(
        "schedules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("workflow_name", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=True),
        sa.Column("interval_seconds", sa.Float(), nullable=True),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("catch_up", sa.Text(), nullable=False),
        sa.Column("max_catch_up", sa.Integer(), nullable=False),
        sa.Column("grace_seconds", sa.Float(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            _in("catch_up", ("SKIP", "ONCE", "ALL")), name=op.f("ck_schedules_catch_up_valid")
        ),
        sa.CheckConstraint(
            "(cron IS NULL) <> (interval_seconds IS NULL)", name=op.f("ck_schedules_timing_valid")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_schedules")),
        schema=schema,
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_fire_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("NOT paused"),
    )
    op.create_index(
        op.f("ix_schedules_workflow_name"), "schedules", ["workflow_name"], schema=schema
    )
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.drop_index(op.f("ix_schedules_workflow_name"), table_name="schedules", schema=schema)
    op.drop_index(
        "ix_schedules_due",
        table_name="schedules",
        schema=schema,
        postgresql_where=sa.text("NOT paused"),
    )
    op.drop_table("schedules", schema=schema)
    # Runs and timers of the new kinds cannot be expressed by 0001's checks.
    op.execute(sa.text(f"DELETE FROM \"{schema}\".timers WHERE kind = 'RUN_TIMEOUT'"))
    op.execute(
        sa.text(f"UPDATE \"{schema}\".runs SET status = 'FAILED' WHERE status = 'TIMED_OUT'")
    )
    _replace_check("timers", "kind", _TIMER_KINDS, schema)
    _replace_check("runs", "status", _RUN_STATUSES, schema)
    op.drop_column("runs", "timed_out_at", schema=schema)
    record_revision(down_revision)
