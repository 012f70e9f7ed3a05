"""Starting a run from SQL: ``start_run_v1(workflow, input, idempotency_key, delay,
shard_key)`` in Legato's schema, callable from a trigger, a procedure or pg_cron inside
the caller's transaction, and ``runs.input_unchecked``, which marks the runs it starts
so the decider validates their input against the workflow's model on their first
decision (docs/api.md, "Starting a run from SQL"; docs/design.md says why there).

The function computes the run's shard key as ``legato.schema.shards.Shards`` does,
with the functions migration 0011 created and the key count it recorded in
``installation``: the tenant's (or else the idempotency key's) key, the run id's low
16 bits chosen to carry it; without either, the fresh id's own key. It writes the
rows ``Client.start`` writes (the run, its first history event, its decide row and
the idempotency key), so the decide_queue trigger wakes the deciders when the caller
commits, and nothing exists if the caller rolls back.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic.ddl_0001 import _q
from legato.alembic.sql_start import start_run_function
from legato.migrations import migration_schema, record_revision

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SIGNATURE = "start_run_v1(text, jsonb, text, interval, text)"


def upgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    # A constant default: PostgreSQL adds the column without rewriting the partitions.
    op.add_column(
        "runs",
        sa.Column("input_unchecked", sa.Boolean(), server_default=sa.false(), nullable=False),
        schema=schema,
    )
    op.execute(
        f"COMMENT ON COLUMN {s}.runs.input_unchecked IS "
        "'started from SQL: the decider validates the input on the first decision'"
    )
    op.execute(start_run_function(schema))
    op.execute(
        f"COMMENT ON FUNCTION {s}.{_SIGNATURE} IS "
        "'start a run of a deployed workflow in the caller''s transaction; returns its id'"
    )
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(f"DROP FUNCTION {_q(schema)}.{_SIGNATURE}")
    op.drop_column("runs", "input_unchecked", schema=schema)
    record_revision(down_revision)
