"""The statements that take rows off a queue lock them in a MATERIALIZED CTE.

The ``UPDATE ... WHERE (pk) IN (SELECT ... FOR UPDATE SKIP LOCKED)`` form crashes
PostgreSQL 18.6 under concurrent updates (``bench/stress_claims.py --form textbook``
reproduces it; see ``legato/engine/repositories/claims.py``), so a refactor that
brings it back must fail here, not in production.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench.stress_claims import textbook_claim
from legato.db import create_engine
from legato.engine.repositories import (
    concurrency,
    decide_queue,
    outbox,
    rate_limits,
    schedules,
    task_queue,
    timers,
)

DIALECT = create_engine("postgresql://nobody@/nowhere", "legato").dialect  # never connects


def locks_in_a_materialized_cte(statement: Any) -> bool:
    sql = " ".join(str(statement.compile(dialect=DIALECT)).split())
    # ``OF table``: a lock over a join with array parameters names the table it locks.
    locking = r"FOR UPDATE (OF \w+ )?SKIP LOCKED\)"
    # Other CTEs (the relay's per-endpoint numbering) may come first; ``JOIN (SELECT``
    # is no ``IN (SELECT``.
    materialized = re.search(r"(WITH|,) \w+ AS MATERIALIZED \(SELECT .* " + locking, sql)
    return bool(materialized) and not re.search(r"\bIN \(SELECT", sql)


@pytest.mark.parametrize(
    "statement",
    [
        task_queue._claim_statement(False),
        task_queue._claim_statement(True),
        decide_queue._take_statement(False, False),
        decide_queue._take_statement(True, False),
        decide_queue._take_statement(False, True),
        decide_queue._take_statement(True, True),
        timers._take_due_statement(False),
        timers._take_due_statement(True),
        task_queue._lock_candidates_statement(),
        concurrency._lock_free_statement(),
        rate_limits._lock_statement(),
        schedules._take_due_statement(),
        outbox._claim_statement(False),
        outbox._claim_statement(True),
    ],
    ids=[
        "worker claim",
        "worker claim across held keys",
        "decider take",
        "decider take chosen",
        "decider take across held keys",
        "decider take chosen across held keys",
        "timer take",
        "timer take across held keys",
        "limited claim candidates",
        "concurrency slots",
        "rate buckets",
        "schedule take",
        "relay claim",
        "relay claim across held keys",
    ],
)
def test_locking_happens_in_a_materialized_cte(statement: Any) -> None:
    assert locks_in_a_materialized_cte(statement)


def test_the_crashing_form_is_told_apart() -> None:
    assert not locks_in_a_materialized_cte(textbook_claim())
