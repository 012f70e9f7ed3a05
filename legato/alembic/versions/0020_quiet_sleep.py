"""A decider going to sleep writes only the sleep flags that change.

``decider_sleeps_v2`` set the flags with an upsert whose ``ON CONFLICT DO UPDATE``
locked every key's row, set or not: sixteen row locks, each a WAL record, and a
transaction id and a WAL flush at every sleep, though a sleep usually finds all but
the one key a writer cleared still set (27 % of the WAL a signal's wake wrote, measured
with ``pg_walinspect``). It now inserts the missing rows with ``DO NOTHING`` (which
locks nothing it finds) and updates only the rows not yet set; a sleep whose flags are
all set writes nothing and commits without a flush. The protocol is unchanged: the
advisory locks, not the rows' locks, order a sleeping decider and the writers
(docs/design.md, "A NOTIFY only for a sleeping decider").

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

from legato.migrations import migration_schema, record_revision

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_decider_sleep = importlib.import_module("legato.alembic.versions.0018_decider_sleep")


def upgrade() -> None:
    op.execute(
        _decider_sleep._sleeps_function(
            migration_schema(), floor=True, changed_only=True, create="CREATE OR REPLACE"
        )
    )
    record_revision(revision)


def downgrade() -> None:
    op.execute(
        _decider_sleep._sleeps_function(migration_schema(), floor=True, create="CREATE OR REPLACE")
    )
    record_revision(down_revision)
