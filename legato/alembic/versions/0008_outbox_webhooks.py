"""The outbox in use: ``webhook_endpoints`` (who gets which run lifecycle events) and
``outbox`` reshaped into one delivery row per (event, endpoint).

The ``outbox`` of ``0001`` was reserved and never written, so it is dropped and created
again in its new shape rather than altered. Both tables are queues that churn: the
queue storage parameters of ``0001`` (``fillfactor = 70``, eager autovacuum).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.alembic.ddl_0001 import INDEX_COMMENTS, QUEUE_STORAGE, _literal_text, _q
from legato.migrations import migration_schema, record_revision

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DUE_WHERE = "dead_lettered_at IS NULL"
_DEAD_WHERE = "dead_lettered_at IS NOT NULL"
_COMMENTS = {
    "ix_outbox_relay_due": "relay loop: claim deliveries due, oldest first, not dead-lettered",
    "ix_outbox_dead_letter": "outbox list/replay: dead-lettered deliveries, newest first",
}


def _now() -> sa.TextClause:
    return sa.text("now()")


def upgrade() -> None:
    schema = migration_schema()
    op.drop_table("outbox", schema=schema)  # drops its two reserved indexes with it
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("event_types", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("workflows", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
        schema=schema,
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("workflow_name", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "next_attempt_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            [f"{schema}.webhook_endpoints.id"],
            name=op.f("fk_outbox_endpoint_id_webhook_endpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        schema=schema,
    )
    op.create_index(
        "ix_outbox_relay_due",
        "outbox",
        ["next_attempt_at"],
        schema=schema,
        postgresql_where=sa.text(_DUE_WHERE),
    )
    op.create_index(
        "ix_outbox_dead_letter",
        "outbox",
        ["dead_lettered_at"],
        schema=schema,
        postgresql_where=sa.text(_DEAD_WHERE),
    )
    for index, comment in _COMMENTS.items():
        op.execute(f"COMMENT ON INDEX {_q(schema)}.{_q(index)} IS {_literal_text(comment)}")
    op.execute(f"ALTER TABLE {_q(schema)}.outbox SET ({QUEUE_STORAGE})")
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("outbox", schema=schema)
    op.drop_table("webhook_endpoints", schema=schema)
    # 0001's reserved shape.
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "next_attempt_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        schema=schema,
    )
    op.create_index(
        "ix_outbox_dead_letter",
        "outbox",
        ["dead_lettered_at"],
        schema=schema,
        postgresql_where=sa.text(_DEAD_WHERE),
    )
    op.create_index(
        "ix_outbox_deliverable",
        "outbox",
        ["next_attempt_at", "id"],
        schema=schema,
        postgresql_where=sa.text("published_at IS NULL AND dead_lettered_at IS NULL"),
    )
    for index in ("ix_outbox_deliverable", "ix_outbox_dead_letter"):
        op.execute(
            f"COMMENT ON INDEX {_q(schema)}.{_q(index)} IS {_literal_text(INDEX_COMMENTS[index])}"
        )
    record_revision(down_revision)
