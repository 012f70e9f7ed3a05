"""A two-connection reproduction of PostgreSQL 18's EvalPlanQual / run-time pruning bug.

    python -m bench.pg18_epq_repro --database-url postgresql://user@host/db [--no-conflict]

No Legato code: asyncpg and SQL only, in a throw-away schema ``legato_epq_repro``
(dropped at the end). Point it at a server you can afford to restart: when the bug
bites, the backend dies and the postmaster restarts every session.

What it does. Connection A updates one row of a hash-partitioned table and holds
it. Connection B runs::

    WITH leased AS (
        UPDATE q SET v = v + 1
         WHERE (k, id) IN (SELECT k, id FROM q WHERE k = ANY($1) FOR UPDATE)
        RETURNING k, id)
    SELECT count(*) FROM leased

with hash and merge joins off, so the plan is a nested loop whose outer side hashes
the locking subquery and whose inner side is an ``Append`` over the partitions with
run-time pruning on the outer row's ``k``. B blocks on A's row; A commits; B's lock
node rechecks the updated row (EvalPlanQual). On 18.x that recheck initialises the
partition-prune state of every CTE and subplan in its own executor state, and frees
it when the lock node's input runs out; the inner ``Append`` is rescanned afterwards
and reads freed memory. ``--no-conflict`` skips A's update, so there is no recheck.

Whether reading freed memory kills the backend depends on whether the memory was
reused. On a stock build it often is not, and the statement returns the right count;
start the server with ``MALLOC_PERTURB_=165`` in its environment (glibc then fills
freed memory) and 18.6 dies with SIGSEGV every time. PostgreSQL 15 is not affected.

Exit status: 0 when the server survived, 1 when the backend crashed, 2 when it
could not connect (a server still recovering from the last crash refuses for a while).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

SCHEMA = "legato_epq_repro"
PARTITIONS = 4
ROWS_PER_KEY = 20

VICTIM = f"""
WITH leased AS (
    UPDATE {SCHEMA}.q SET v = v + 1
     WHERE (k, id) IN (SELECT k, id FROM {SCHEMA}.q WHERE k = ANY($1::int[]) FOR UPDATE)
    RETURNING k, id)
SELECT count(*) FROM leased
"""


async def _setup(conn: asyncpg.Connection) -> None:
    await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}")
    await conn.execute(
        f"CREATE TABLE {SCHEMA}.q (k int NOT NULL, id int NOT NULL, v int NOT NULL DEFAULT 0, "
        "PRIMARY KEY (k, id)) PARTITION BY HASH (k)"
    )
    for remainder in range(PARTITIONS):
        await conn.execute(
            f"CREATE TABLE {SCHEMA}.q{remainder} PARTITION OF {SCHEMA}.q "
            f"FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {remainder})"
        )
    await conn.execute(
        f"INSERT INTO {SCHEMA}.q (k, id) SELECT k, id FROM generate_series(1, {PARTITIONS}) k, "
        f"generate_series(1, {ROWS_PER_KEY}) id; ANALYZE {SCHEMA}.q"
    )


async def _blocked(observer: asyncpg.Connection, pid: int) -> None:
    """Until ``pid`` waits on a row lock (bounded: 30 s)."""
    for _ in range(3000):
        waiting = await observer.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        )
        if waiting:
            return
        await asyncio.sleep(0.01)
    raise SystemExit("the locking statement never blocked on the held row")


async def run(url: str, conflict: bool) -> int:
    try:
        holder = await asyncpg.connect(url)
        victim = await asyncpg.connect(url)
    except (asyncpg.PostgresError, OSError) as error:  # e.g. still recovering from a crash
        print(f"cannot connect: {error}")
        return 2
    await _setup(holder)
    print((await holder.fetchval("SELECT version()")).split(" on ")[0])
    await victim.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
    held = holder.transaction()
    await held.start()
    if conflict:
        await holder.execute(f"UPDATE {SCHEMA}.q SET v = v + 10 WHERE k = 1 AND id = 1")
    statement = asyncio.create_task(victim.fetchval(VICTIM, list(range(1, PARTITIONS + 1))))
    if conflict:
        await _blocked(holder, victim.get_server_pid())
    await held.commit()
    try:
        count = await statement
    except (asyncpg.PostgresConnectionError, ConnectionError, OSError) as error:
        print(f"CRASHED: the backend died ({type(error).__name__}); see the server log")
        return 1
    expected = PARTITIONS * ROWS_PER_KEY
    print(f"survived: the statement updated {count} rows (expected {expected})")
    await victim.close()
    await holder.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    await holder.close()
    return 0 if count == expected else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="postgresql://user@host/db")
    parser.add_argument(
        "--no-conflict", action="store_true", help="no concurrent update: no recheck happens"
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.database_url, conflict=not args.no_conflict)))


if __name__ == "__main__":
    main()
