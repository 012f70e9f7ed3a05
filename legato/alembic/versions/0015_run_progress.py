"""``run_progress``: what running tasks report (``ctx.progress`` / ``ctx.stream``),
durable and ordered per run (``Client.stream``, docs/api.md "Streaming progress").

Keyed (shard, run_id, seq) like ``run_events`` and partitioned the same way, by month of
run id, so retention drops a month of progress with the month's history: the partition
functions are replaced by 0002's with ``run_progress`` among the monthly tables (made
with the runs months, dropped before them). The months that exist already get their
``run_progress`` partition here, with the bounds of the ``runs`` partition of that month.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic import ddl_0001
from legato.alembic.partition_functions import (
    CHILDREN_0002,
    MONTHLY_0002,
    drop_function,
    ensure_function,
)
from legato.migrations import migration_schema, record_revision

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHLY = (*MONTHLY_0002, "run_progress")
CHILDREN = ("run_progress", *CHILDREN_0002)


def _month_partitions(schema: str) -> str:
    """A ``run_progress`` partition beside each ``runs`` month partition."""
    return f"""
DO $$
DECLARE
    sch constant text := {ddl_0001.sql_literal(schema)};
    rec record;
BEGIN
    FOR rec IN
        SELECT c.relname::text AS relname, pg_get_expr(c.relpartbound, c.oid) AS bound
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = format('%I.runs', sch)::regclass
           AND c.relname ~ '_p[0-9]{{6}}$'
    LOOP
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.run_progress %s', sch,
                       'run_progress_p' || substring(rec.relname FROM '_p([0-9]{{6}})$'),
                       sch, rec.bound);
    END LOOP;
END;
$$"""


def upgrade() -> None:
    schema = migration_schema()
    op.create_table(
        "run_progress",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.dialects.postgresql.JSONB(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["shard", "run_id"],
            [f"{schema}.runs.shard", f"{schema}.runs.id"],
            name=op.f("fk_run_progress_shard_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("shard", "run_id", "seq", name=op.f("pk_run_progress")),
        schema=schema,
        postgresql_partition_by="RANGE (run_id)",
    )
    op.execute(_month_partitions(schema))
    op.execute(ensure_function(schema, MONTHLY))
    op.execute(drop_function(schema, CHILDREN))
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(ensure_function(schema))
    op.execute(drop_function(schema))
    op.drop_table("run_progress", schema=migration_schema())
    record_revision(down_revision)
