"""Index comments for the indexes of ``0006`` and ``0007``: every index Legato creates
names the loop or command its queries come from (``obj_description``), like those of
``0001``, ``0003`` and ``0008``.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from legato.alembic.ddl_0001 import _literal_text, _q
from legato.migrations import migration_schema, record_revision

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COMMENTS = {
    "ix_schedules_due": "scheduler loop: take schedules due, not paused",
    "ix_schedules_workflow_name": "deploy: replace a workflow's stored schedules",
    "ix_concurrency_slots_holder": "worker report, lease keeper, sweeper: slots held by attempts",
    "ix_task_cache_expires_at": "maintenance loop: prune expired task cache entries",
}


def _set_comments(*, clear: bool) -> None:
    schema = migration_schema()
    for index, comment in COMMENTS.items():
        value = "NULL" if clear else _literal_text(comment)
        op.execute(f"COMMENT ON INDEX {_q(schema)}.{_q(index)} IS {value}")


def upgrade() -> None:
    _set_comments(clear=False)
    record_revision(revision)


def downgrade() -> None:
    _set_comments(clear=True)
    record_revision(down_revision)
