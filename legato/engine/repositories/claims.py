"""How a loop takes rows off a queue: lock them in a ``MATERIALIZED`` CTE, then modify
them by primary key.

``UPDATE q ... WHERE (pk) IN (SELECT ... FOR UPDATE SKIP LOCKED)`` is the textbook
form, and PostgreSQL 18.6 crashes on it: when the locking subquery scans a
partitioned table with run-time partition pruning (``queue = ANY($1)`` over the
hash partitions of ``task_queue``) and concurrent writers touch the same rows, the
backend dies (SIGSEGV, a corrupted scan key in ``_bt_preprocess_keys``) and the
postmaster restarts every session. ``bench/stress_claims.py`` reproduces it within
seconds; the form below ran minutes of the same load without one. A materialized
CTE is evaluated once and never rescanned.
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
