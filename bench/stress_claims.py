"""Hammer the worker's claim with concurrent writers and report whether PostgreSQL survived.

    python -m bench.stress_claims [--seconds 60] [--form legato|textbook] [--database-url URL]

``legato`` runs the claim the engine uses (``legato.engine.repositories.task_queue.claim``);
``textbook`` runs the same claim written as ``UPDATE ... WHERE (pk) IN (SELECT ... FOR
UPDATE SKIP LOCKED)``, which crashes PostgreSQL 18.6 within seconds under this load: the
churners' committed updates make the claim's lock node recheck rows (EvalPlanQual),
18.x frees the recheck's partition-prune state when the lock node's input runs out, and
the claim's nested loop then rescans its pruned ``Append`` over the hash partitions and
reads the freed memory (docs/operations.md; ``bench/pg18_epq_repro.py`` forces the same
with two connections). Claimers lease rows while churners
enqueue more and delete, extend or drop the leases of random leased rows, on a fresh
migrated database. Exit status 1 when a backend crashed (the server dropped every
connection or was in recovery).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Interval,
    Table,
    Text,
    TextClause,
    bindparam,
    delete,
    func,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from bench.harness import Server
from legato.db import create_engine
from legato.engine.repositories import notify, task_queue
from legato.engine.repositories.params import SHARD_PARAM, shard_param
from legato.schema import TaskQueue

KEY = 0  # every row lives in one shard key: one key's claim is what is hammered
QUEUES = ("default", "q1", "q2")
TASK_NAMES = ("a", "b", "c")
LEASE = timedelta(seconds=30)


def textbook_claim() -> Any:
    """The claim as the ``IN (subquery)`` form in a data-modifying CTE, as the engine
    wrote it before (leasing queue rows only)."""
    candidates = task_queue.claim_candidates().with_for_update(skip_locked=True)
    leased = (
        update(TaskQueue.table)
        .where(
            TaskQueue.shard == shard_param(),
            tuple_(TaskQueue.queue, TaskQueue.task_id).in_(candidates),
        )
        .values(
            lease_owner=bindparam("owner", type_=Text()),
            lease_expires_at=func.now() + bindparam("lease", type_=Interval()),
        )
        .returning(TaskQueue.queue, TaskQueue.task_id)
        .cte("leased")
    )
    return select(leased.c.queue, leased.c.task_id)


async def _claim(conn: AsyncConnection, form: str, owner: str) -> list[tuple[str, uuid.UUID]]:
    queue = random.choice(QUEUES)
    names = random.sample(TASK_NAMES, random.randint(1, len(TASK_NAMES)))
    limit = random.choice((1, 16, 64, 200))
    if form == "legato":
        claimed = await task_queue.claim(conn, KEY, queue, names, owner, limit, LEASE)
        return [(c.queue, c.task_id) for c in claimed]
    params = {
        SHARD_PARAM: KEY,
        "in_queue": queue,
        "task_names": names,
        "limit": limit,
        "owner": owner,
    }
    result = await conn.execute(textbook_claim(), {**params, "lease": LEASE})
    return [(queue, task_id) for queue, task_id in result]


async def claimer(engine: AsyncEngine, form: str, deadline: float) -> int:
    """Claim as fast as possible, as a busy worker does."""
    owner = f"stress-{uuid.uuid4().hex[:6]}"
    claims = 0
    while time.monotonic() < deadline:
        async with engine.connect() as conn:  # autocommit, as the worker claims
            await _claim(await conn.execution_options(isolation_level="AUTOCOMMIT"), form, owner)
        claims += 1
    return claims


async def prefill(engine: AsyncEngine, rows: int) -> None:
    """A backlog of leased rows, as a busy queue has: the claim's plan changes with it."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await task_queue.enqueue(conn, KEY, [_new_item(now) for _ in range(rows)])
        for queue in QUEUES:
            await task_queue.claim(conn, KEY, queue, TASK_NAMES, "prefill", rows, LEASE)


def _new_item(now: datetime) -> task_queue.NewQueueRow:
    return task_queue.NewQueueRow(
        queue=random.choice(QUEUES),
        task_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        attempt=1,
        task_name=random.choice(TASK_NAMES),
        priority=random.randint(-1, 1),
        available_at=now - timedelta(seconds=random.random()),
    )


async def churner(engine: AsyncEngine, deadline: float) -> int:
    """Enqueue random batches; finish, extend and drop the leases of random leased rows of
    any owner, each in its own statement: other sessions' updates to rows the claimers
    are scanning (as the sweeper and reports make)."""
    rows = 0
    while time.monotonic() < deadline:
        n = random.randint(1, 300)
        now = datetime.now(UTC)
        try:
            async with engine.begin() as conn:
                await task_queue.enqueue(conn, KEY, [_new_item(now) for _ in range(n)])
            for statement in (
                delete(TaskQueue.table).where(_random_leased(n)),
                update(TaskQueue.table)
                .where(_random_leased(n // 3))
                .values(lease_expires_at=func.now() + LEASE),
                update(TaskQueue.table)
                .where(_random_leased(n // 3))
                .values(lease_owner=None, lease_expires_at=None),
            ):
                async with engine.begin() as conn:
                    await conn.execute(statement)
            if random.random() < 0.05:  # fresh statistics change the claim's plan
                async with engine.begin() as conn:
                    await conn.execute(analyze_statement(conn, TaskQueue.table))
        except DBAPIError as error:
            if not _deadlock(error):
                raise
        rows += n
    return rows


def _random_leased(n: int) -> ColumnElement[bool]:
    leased = (
        select(TaskQueue.queue, TaskQueue.task_id)
        .where(TaskQueue.lease_expires_at.is_not(None))
        .order_by(func.random())
        .limit(n)
    )
    return tuple_(TaskQueue.queue, TaskQueue.task_id).in_(leased)


def analyze_statement(conn: AsyncConnection, table: Table) -> TextClause:
    """``ANALYZE`` of ``table`` in the connection's schema, quoted by the dialect."""
    schema = notify.schema_of(conn)
    preparer = conn.dialect.identifier_preparer
    return text(f"ANALYZE {preparer.quote_schema(schema)}.{preparer.quote(table.name)}")


def _deadlock(error: DBAPIError) -> bool:
    """Random rows locked in random order deadlock now and then: expected, not a crash."""
    return "deadlock detected" in str(error.orig)


async def stress(database_url: str | None, form: str, seconds: float) -> bool:
    """True when the server survived ``seconds`` of concurrent claims."""
    server = Server(database_url)
    await server.start()
    try:
        target = await server.fresh("stress_claims")
        engine = create_engine(target.url, target.schema, pool_size=8)
        await prefill(engine, 20_000)
        deadline = time.monotonic() + seconds
        try:
            results = await asyncio.gather(
                *(claimer(engine, form, deadline) for _ in range(5)),
                *(churner(engine, deadline) for _ in range(2)),
                return_exceptions=True,
            )
        finally:
            await engine.dispose()
    finally:
        for _ in range(30):  # after a crash the server spends a moment in recovery
            try:
                await server.stop()
                break
            except DBAPIError:
                await asyncio.sleep(1)
    crashes = [r for r in results if isinstance(r, DBAPIError)]
    others = [r for r in results if isinstance(r, BaseException) and r not in crashes]
    if others:
        raise others[0]
    claims = sum(r for r in results[:5] if isinstance(r, int))
    print(f"form={form} seconds={seconds:.0f} claims={claims} (by claimers that survived)")
    for crash in crashes[:1]:
        print(f"the server dropped the connection: {crash.orig}", file=sys.stderr)
    return not crashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--form", choices=("legato", "textbook"), default="legato")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    survived = asyncio.run(stress(args.database_url, args.form, args.seconds))
    sys.exit(0 if survived else 1)


if __name__ == "__main__":
    main()
