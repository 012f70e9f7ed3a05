"""Statements and round trips per decision on a Citus coordinator, both layouts.

``python -m bench.citus_statements COORDINATOR_URL [--runs N]`` makes two fresh schemas
of ``CITUS_KEYS`` keys on the coordinator's database, one distributed over its workers
and one kept on the coordinator alone (the two ``legato bench --citus`` layouts), and
in each drains ``N`` e2e-1 runs (one no-op task: two decisions a run, the one that
schedules the task and the one that finishes the run) with one in-process runtime
whose engine counts what it sends (SQLAlchemy's cursor and transaction events; the
runs are started before the count begins). A round trip is a statement, a BEGIN or a
COMMIT/ROLLBACK. Citus' own counters (``citus_stat_counters``, switched on for the
database) give the share of the statements Citus ran on one shard. Prints one line per
layout; ratios between the layouts are the figures (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bench.flows import app, one
from bench.harness import CITUS_KEYS
from legato import Client, RunStatus, Runtime, migrations
from legato.db import create_engine
from legato.distributed import distribute

DECISIONS_PER_RUN = 2
DEADLINE_SECONDS = 300


@dataclass
class Counts:
    statements: int = 0
    begins: int = 0
    ends: int = 0

    @property
    def round_trips(self) -> int:
        return self.statements + self.begins + self.ends


@contextmanager
def counted(engine: AsyncEngine) -> Iterator[Counts]:
    """What ``engine`` sends inside the block."""
    counts = Counts()
    sync = engine.sync_engine

    def statement(*_: Any) -> None:
        counts.statements += 1

    def begin(*_: Any) -> None:
        counts.begins += 1

    def end(*_: Any) -> None:
        counts.ends += 1

    hooks = [
        ("before_cursor_execute", statement),
        ("begin", begin),
        ("commit", end),
        ("rollback", end),
    ]
    for name, hook in hooks:
        event.listen(sync, name, hook)
    try:
        yield counts
    finally:
        for name, hook in hooks:
            event.remove(sync, name, hook)


async def _citus_counters(conn: AsyncConnection) -> tuple[int, int]:
    row = (
        await conn.exec_driver_sql(
            "SELECT query_execution_single_shard, query_execution_multi_shard "
            "FROM citus_stat_counters WHERE name = current_database()"
        )
    ).one()
    single, multi = tuple(row)
    return int(single), int(multi)


async def _running(engine: AsyncEngine, schema: str) -> int:
    """Runs still running (a literal statement: the probe's sessions plan generically)."""
    async with engine.connect() as conn:
        count = f"SELECT count(*) FROM \"{schema}\".runs WHERE status = '{RunStatus.RUNNING}'"
        return int((await conn.exec_driver_sql(count)).scalar_one())


async def measure(url: str, layout: str, runs: int) -> str:
    schema = f"legato_stmts_{uuid.uuid4().hex[:8]}"
    engine = create_engine(url, schema)
    probe = create_engine(url, schema, isolation_level="AUTOCOMMIT")
    try:
        async with probe.connect() as conn:  # before the engine's first session
            database = make_url(url).database
            await conn.exec_driver_sql(
                f'ALTER DATABASE "{database}" SET citus.enable_stat_counters = on'
            )
        await migrations.upgrade(engine, schema, shard_count=CITUS_KEYS)
        if layout == "distributed":
            async with probe.connect() as conn:
                await distribute(conn, schema, CITUS_KEYS)
        async with Client(engine, app=app) as client:
            await client.deploy()
            await client.start_many(one, list(range(runs)))
        runtime = Runtime(engine, app, poll_interval=0.2)
        async with probe.connect() as conn:
            single_before, multi_before = await _citus_counters(conn)
        with counted(engine) as counts:
            started = time.perf_counter()
            await runtime.start()
            try:
                while await _running(probe, schema) > 0:
                    if time.perf_counter() - started > DEADLINE_SECONDS:
                        raise RuntimeError(
                            f"{layout}: runs still running after {DEADLINE_SECONDS}s"
                        )
                    await asyncio.sleep(0.05)
                seconds = time.perf_counter() - started
            finally:
                await runtime.stop()
        async with probe.connect() as conn:
            single_after, multi_after = await _citus_counters(conn)
        single, multi = single_after - single_before, multi_after - multi_before
        decisions = runs * DECISIONS_PER_RUN
        share = single / (single + multi) if single + multi else 0.0
        return (
            f"{layout}: {runs} e2e-1 runs in {seconds:.1f} s, "
            f"{counts.statements / decisions:.1f} statements and "
            f"{counts.round_trips / decisions:.1f} round trips per decision "
            f"(idle polls included); Citus executions on one shard {single}, on several "
            f"{multi} ({share:.0%} single-shard)"
        )
    finally:
        async with probe.connect() as conn:
            await conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await engine.dispose()
        await probe.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the Citus coordinator's database")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        for layout in ("distributed", "single-node"):
            print(f"round {round_}, {await measure(args.url, layout, args.runs)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
