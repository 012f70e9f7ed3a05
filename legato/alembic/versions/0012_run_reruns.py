"""``runs.rerun_of``: a run started by ``Client.rerun`` names the run it reruns, and
``ix_runs_rerun_of`` finds a run's reruns within its shard key (a rerun lives in its
original's key).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic.ddl_0001 import _literal_text, _q
from legato.migrations import migration_schema, record_revision

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_runs_rerun_of"
COMMENT = "runs show, rerun, bulk rerun: a run's reruns within its key"


def upgrade() -> None:
    schema = migration_schema()
    # Nullable without a default: PostgreSQL adds the column without rewriting partitions.
    op.add_column("runs", sa.Column("rerun_of", sa.Uuid(), nullable=True), schema=schema)
    op.execute(
        f"CREATE INDEX {_q(INDEX)} ON {_q(schema)}.runs (shard, rerun_of) "
        "WHERE rerun_of IS NOT NULL"
    )
    op.execute(f"COMMENT ON INDEX {_q(schema)}.{_q(INDEX)} IS {_literal_text(COMMENT)}")
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(f"DROP INDEX {_q(schema)}.{_q(INDEX)}")
    op.drop_column("runs", "rerun_of", schema=schema)
    record_revision(down_revision)
