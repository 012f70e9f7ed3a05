"""``task_queue.fair_key`` / ``fair_weight``: the key and weight of an attempt of a fair
queue (``FairShare``), and ``ix_task_queue_fair``, which the worker's fair claim walks
(the distinct waiting keys of one shard key and queue, then each key's best rows).

Both columns are nullable without a default, so PostgreSQL adds them without rewriting
a partition; the index is partial on ``fair_key IS NOT NULL``, so the rows of every
other queue (NULL) never enter it and their enqueue and claim cost what they did.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic.ddl_0001 import _literal_text, _q
from legato.migrations import migration_schema, record_revision

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_task_queue_fair"
COMMENT = "worker loop: fair claim of a fair queue's waiting keys within one key and queue"


def upgrade() -> None:
    schema = migration_schema()
    op.add_column("task_queue", sa.Column("fair_key", sa.Text(), nullable=True), schema=schema)
    op.add_column(
        "task_queue", sa.Column("fair_weight", sa.Integer(), nullable=True), schema=schema
    )
    op.execute(
        f"CREATE INDEX {_q(INDEX)} ON {_q(schema)}.task_queue "
        "(shard, queue, fair_key, priority DESC, available_at) "
        "WHERE lease_expires_at IS NULL AND fair_key IS NOT NULL"
    )
    op.execute(f"COMMENT ON INDEX {_q(schema)}.{_q(INDEX)} IS {_literal_text(COMMENT)}")
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(f"DROP INDEX {_q(schema)}.{_q(INDEX)}")
    op.drop_column("task_queue", "fair_weight", schema=schema)
    op.drop_column("task_queue", "fair_key", schema=schema)
    record_revision(down_revision)
