"""A single-node decider's take deletes what it took through the primary key by arrays.

``decider_take_v1`` deleted the decide rows its take had locked with ``DELETE ... USING
taken`` on the primary key. Its plan is made from the table's statistics, and a queue's
statistics are whatever autovacuum sampled: once it had analyzed ``decide_queue`` while
the queue was empty, the planner expected one taken row and one row in the table, and
joined them by scanning the primary key whole for every taken row (399,800 rows removed
by the join's filter for a take of 200: 56 ms instead of 1 ms, docs/performance.md).
``decider_take_v2`` is the same take, lock and read, its delete ``WHERE shard = ANY
(keys) AND run_id = ANY (ARRAY(SELECT run_id FROM taken))``: both arrays are conditions
on the primary key's columns, so it is read only where the taken rows are, whatever
the statistics say. (By row address, ``ctid = ANY (...)``, loses a row a concurrent
update rechecked: the take returns the address of the version it first saw.)
``decider_take_v1`` stays for the processes of the version before during a deploy.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

from legato.alembic.ddl_0001 import _q
from legato.migrations import migration_schema, record_revision

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_decision_paths = importlib.import_module("legato.alembic.versions.0019_decision_paths")


def upgrade() -> None:
    schema = migration_schema()
    op.execute(_decision_paths._take_function(schema, by_key_arrays=True))
    op.execute(
        f"COMMENT ON FUNCTION {_q(schema)}.decider_take_v2(smallint[], integer, timestamptz) IS "
        "'a single-node decider''s take, lock and read of a batch, in one call'"
    )
    record_revision(revision)


def downgrade() -> None:
    op.execute(
        f"DROP FUNCTION {_q(migration_schema())}.decider_take_v2(smallint[], integer, timestamptz)"
    )
    record_revision(down_revision)
