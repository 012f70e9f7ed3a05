"""A queue row written leased wakes no worker: the task_queue trigger's function notifies
only for unleased rows.

A decision that hands an attempt to the worker of its own process writes the queue row
leased to it (``legato.engine.transport.handoff``): no worker can claim it, so the
NOTIFY the trigger sent for it woke every other process's worker for an empty claim,
and made the decision's commit take PostgreSQL's notify lock (which serialises the
commits of notifying transactions). Rows due within a second and unleased still
notify, once per key, as in 0016.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

from legato.migrations import migration_schema, record_revision

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_start_path = importlib.import_module("legato.alembic.versions.0016_start_path")


def upgrade() -> None:
    schema = migration_schema()
    op.execute(
        _start_path._queue_function(
            schema, "task_queue", "tasks", due_only=True, unleased_only=True
        )
    )
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(_start_path._queue_function(schema, "task_queue", "tasks", due_only=True))
    record_revision(down_revision)
