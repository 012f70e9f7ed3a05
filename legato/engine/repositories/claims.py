"""How a loop takes rows off a queue: lock them in a ``MATERIALIZED`` CTE, then modify
them by primary key.

``UPDATE q ... WHERE (pk) IN (SELECT ... FOR UPDATE SKIP LOCKED)`` is the textbook
form, and PostgreSQL 18.x crashes on it: when its lock node rechecks a row a concurrent
transaction updated (EvalPlanQual) and then runs out of input, 18.x frees partition-prune
state that the nested loop's pruned ``Append`` over the partitions still uses on its
next rescan (docs/operations.md). Here no pruned ``Append`` is rescanned after the lock
node ends; ``tests/integration/test_epq_rechecks.py`` forces the recheck to keep it so.
"""

from __future__ import annotations

from typing import TypeVarTuple

from sqlalchemy import CTE, Select, Table

_Columns = TypeVarTuple("_Columns")


def locked(candidates: Select[*_Columns], name: str, of: Table | None = None) -> CTE:
    """``candidates`` locked with ``FOR UPDATE SKIP LOCKED`` in a materialized CTE: the
    rows this claim owns until its transaction ends; other claimers skip them. ``of``
    names the one table locked when ``candidates`` joins array parameters."""
    return candidates.with_for_update(skip_locked=True, of=of).cte(name).prefix_with("MATERIALIZED")
