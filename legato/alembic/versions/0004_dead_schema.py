"""Remove dead schema: ``timers.claimed_at`` (and its index), ``workflow_definitions.deleted_at``.

``timers.claimed_at`` was never written: the timer loop deletes a due timer in the
transaction that acts on it (``timers.take_due``), so the primary key ``(fire_at, id)``
serves the claim. ``workflow_definitions.deleted_at`` was read but never written:
definitions are never deleted.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.migrations import migration_schema, record_revision

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.drop_index("ix_timers_unclaimed", table_name="timers", schema=schema)
    op.drop_column("timers", "claimed_at", schema=schema)
    op.drop_column("workflow_definitions", "deleted_at", schema=schema)
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "workflow_definitions",
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    op.add_column(
        "timers", sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True), schema=schema
    )
    op.create_index(
        "ix_timers_unclaimed",
        "timers",
        ["fire_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("claimed_at IS NULL"),
    )
    quoted = op.get_bind().dialect.identifier_preparer.quote(schema)
    op.execute(
        f"COMMENT ON INDEX {quoted}.ix_timers_unclaimed IS 'timer loop: due, unclaimed timers'"
    )
    record_revision(down_revision)
