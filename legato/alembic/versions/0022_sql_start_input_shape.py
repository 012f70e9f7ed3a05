"""``start_run_v1()`` refuses the inputs ``Client.start`` refuses for their shape.

A run started from SQL with an input nested thousands of levels deep was stored, and
every decider that took it failed to read it (``json.loads`` recurses once per level)
and stopped: one statement stopped every run of the installation. The same went for a
number of thousands of digits (Python converts at most 4,300 digits of text to an int).
``Client.start`` refused both; the function now refuses them too, naming the workflow,
before writing anything (``legato.alembic.sql_start.JSON_SHAPE_CHECK``).

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from legato.alembic.sql_start import (
    FINITE_DELAY_CHECK,
    JSON_SHAPE_CHECK,
    PRINTABLE_CHECK,
    start_run_function,
)
from legato.migrations import migration_schema, record_revision

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _start_run(json_check: str) -> str:
    return start_run_function(
        migration_schema(),
        create="CREATE OR REPLACE",
        delay_check=FINITE_DELAY_CHECK,
        printable_check=PRINTABLE_CHECK,
        json_check=json_check,
    )


def upgrade() -> None:
    op.execute(_start_run(JSON_SHAPE_CHECK))
    record_revision(revision)


def downgrade() -> None:
    op.execute(_start_run(""))
    record_revision(down_revision)
