"""Partition functions: UTC arithmetic whatever the connection's time zone, and retention
that refuses a cut-off after the start of the current month.

0001's functions did their month and day arithmetic on ``timestamptz`` values, which
PostgreSQL computes in the session's ``timezone``: west of UTC, ``drop_partitions_v1``
saw a month end eight hours late and neither dropped nor reported it, and
``ensure_partitions_v1`` could step across a DST change into the wrong month. Here the
arithmetic is on UTC wall-clock ``timestamp`` values, converted only at the bounds, and
each function runs with ``timezone = UTC`` besides. ``drop_partitions_v1`` also refused
nothing: a cut-off in the future dropped the current month and every month ahead.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from legato.alembic import ddl_0001
from legato.alembic.partition_functions import drop_function, ensure_function
from legato.migrations import migration_schema, record_revision

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.execute(ensure_function(schema))
    op.execute(drop_function(schema))
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(ddl_0001.ensure_partitions_function(schema))
    op.execute(ddl_0001.drop_partitions_function(schema))
    record_revision(down_revision)
