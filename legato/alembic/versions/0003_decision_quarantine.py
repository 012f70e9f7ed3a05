"""Decision back-off and quarantine: ``decide_queue`` counts failed decisions, keeps the
last error, and parks a run that keeps failing (``quarantined_at``) out of the take.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic import ddl_0001
from legato.alembic.ddl_0001 import _literal_text, _q
from legato.migrations import migration_schema, record_revision

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TAKE_WHERE = "quarantined_at IS NULL"
_QUARANTINED_WHERE = "quarantined_at IS NOT NULL"
_COMMENTS = {
    "ix_decide_queue_decider": "decider loop: claim runs to decide, oldest first, not quarantined",
    "ix_decide_queue_quarantined": "runs list --quarantined: runs parked after failed decisions",
}


def upgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "decide_queue",
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        schema=schema,
    )
    op.add_column("decide_queue", sa.Column("last_error", sa.Text(), nullable=True), schema=schema)
    op.add_column(
        "decide_queue",
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    # The decider's take skips quarantined rows through the index itself.
    op.drop_index(op.f("ix_decide_queue_available_at"), table_name="decide_queue", schema=schema)
    op.create_index(
        "ix_decide_queue_decider",
        "decide_queue",
        ["available_at"],
        schema=schema,
        postgresql_where=sa.text(_TAKE_WHERE),
    )
    op.create_index(
        "ix_decide_queue_quarantined",
        "decide_queue",
        ["quarantined_at"],
        schema=schema,
        postgresql_where=sa.text(_QUARANTINED_WHERE),
    )
    for index, comment in _COMMENTS.items():
        op.execute(f"COMMENT ON INDEX {_q(schema)}.{_q(index)} IS {_literal_text(comment)}")
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.drop_index(
        "ix_decide_queue_quarantined",
        table_name="decide_queue",
        schema=schema,
        postgresql_where=sa.text(_QUARANTINED_WHERE),
    )
    op.drop_index(
        "ix_decide_queue_decider",
        table_name="decide_queue",
        schema=schema,
        postgresql_where=sa.text(_TAKE_WHERE),
    )
    op.create_index(
        op.f("ix_decide_queue_available_at"), "decide_queue", ["available_at"], schema=schema
    )
    op.execute(
        f"COMMENT ON INDEX {_q(schema)}.{_q('ix_decide_queue_available_at')} IS "
        f"{_literal_text(ddl_0001.INDEX_COMMENTS['ix_decide_queue_available_at'])}"
    )
    op.drop_column("decide_queue", "quarantined_at", schema=schema)
    op.drop_column("decide_queue", "last_error", schema=schema)
    op.drop_column("decide_queue", "failures", schema=schema)
    record_revision(down_revision)
