"""runs.trace_context: the W3C trace context of the request that started the run.

``Client.start`` stores the caller's ``traceparent``/``tracestate`` here (when
OpenTelemetry is installed and a span is active); the worker's claim returns it with
each attempt, so attempt spans join the starting request's trace.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.migrations import migration_schema, record_revision

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable column without a default: a catalog-only change, no table rewrite.
    op.add_column(
        "runs",
        sa.Column("trace_context", postgresql.JSONB(), nullable=True),
        schema=migration_schema(),
    )
    record_revision(revision)


def downgrade() -> None:
    op.drop_column("runs", "trace_context", schema=migration_schema())
    record_revision(down_revision)
