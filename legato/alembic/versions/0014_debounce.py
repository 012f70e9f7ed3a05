"""``debounces``: the open debounce window of each (workflow, key), pointing at the run
it will start (``Client.start(..., debounce=Debounce(...))``, docs/api.md "Debounce").

One row per (shard, workflow name, key), the key leading its primary key like every
run-scoped table's; ``expires_at`` (past the window's start, indexed) lets maintenance
prune closed windows.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic.ddl_0001 import _q
from legato.migrations import migration_schema, record_revision

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.create_table(
        "debounces",
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("shard", "namespace", "key", name=op.f("pk_debounces")),
        schema=schema,
    )
    op.create_index(op.f("ix_debounces_expires_at"), "debounces", ["expires_at"], schema=schema)
    op.execute(
        f"COMMENT ON INDEX {_q(schema)}.ix_debounces_expires_at IS "
        "'maintenance loop: prune closed debounce windows'"
    )
    record_revision(revision)


def downgrade() -> None:
    op.drop_table("debounces", schema=migration_schema())
    record_revision(down_revision)
