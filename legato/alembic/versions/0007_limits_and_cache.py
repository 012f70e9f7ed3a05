"""Concurrency slots, rate-limit buckets and the task output cache.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.alembic.ddl_0001 import QUEUE_STORAGE
from legato.migrations import migration_schema, record_revision

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A bucket row is rewritten by every limited claim: half of each page stays free so the
# rewrite is a HOT update on the same page, and autovacuum runs after a few hundred
# dead versions instead of a fraction of a tiny table.
BUCKET_STORAGE = (
    "fillfactor = 50, autovacuum_vacuum_scale_factor = 0, "
    "autovacuum_vacuum_cost_limit = 2000, autovacuum_vacuum_threshold = 200"
)


def upgrade() -> None:
    schema = migration_schema()
    now = sa.text("now()")
    op.create_table(
        "concurrency_slots",
        sa.Column("limit_name", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("holder_task_id", sa.Uuid(), nullable=True),
        sa.Column("holder_owner", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), server_default=now, nullable=False),
        sa.PrimaryKeyConstraint("limit_name", "key", "slot", name=op.f("pk_concurrency_slots")),
        schema=schema,
    )
    op.create_index(
        "ix_concurrency_slots_holder",
        "concurrency_slots",
        ["holder_task_id"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("holder_task_id IS NOT NULL"),
    )
    op.create_table(
        "rate_buckets",
        sa.Column("limit_name", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=now, nullable=False),
        sa.PrimaryKeyConstraint("limit_name", "key", name=op.f("pk_rate_buckets")),
        schema=schema,
    )
    op.create_table(
        "task_cache",
        sa.Column("task_name", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("output", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=now, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("task_name", "key", name=op.f("pk_task_cache")),
        schema=schema,
    )
    op.create_index(
        op.f("ix_task_cache_expires_at"), "task_cache", ["expires_at"], unique=False, schema=schema
    )
    quoted = op.get_bind().dialect.identifier_preparer.quote(schema)
    op.execute(f"ALTER TABLE {quoted}.concurrency_slots SET ({QUEUE_STORAGE})")
    op.execute(f"ALTER TABLE {quoted}.rate_buckets SET ({BUCKET_STORAGE})")
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    for table in ("task_cache", "rate_buckets", "concurrency_slots"):
        op.drop_table(table, schema=schema)
    record_revision(down_revision)
