"""``tasks.cached``: an attempt whose output the output cache served (its body did not
run), so the decider's ``task_completed`` event can say so.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.migrations import migration_schema, record_revision

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default: PostgreSQL adds the column without rewriting the partitions.
    op.add_column(
        "tasks",
        sa.Column("cached", sa.Boolean(), server_default=sa.false(), nullable=False),
        schema=migration_schema(),
    )
    record_revision(revision)


def downgrade() -> None:
    op.drop_column("tasks", "cached", schema=migration_schema())
    record_revision(down_revision)
