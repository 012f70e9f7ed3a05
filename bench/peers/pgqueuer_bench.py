"""pgqueuer: enqueue one at a time, enqueue batched, and end to end of a no-op job
(one worker process, drain mode) — the pure-queue ceiling a workflow engine pays extra on top of.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench.peers import SIZES, emit, fail, figure


async def _commits(url: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        value = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(value)
    finally:
        await conn.close()


async def main(url: str, size: str) -> None:
    try:
        import asyncpg
        import pgqueuer
        from pgqueuer import AsyncpgDriver, Queries, QueueManager
        from pgqueuer.types import QueueExecutionMode
    except ImportError as error:
        fail(f"pgqueuer is not installed ({error}): pip install pgqueuer")
        return
    n = SIZES[size]
    version = getattr(pgqueuer, "__version__", "?")
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    figures: list[dict[str, Any]] = []

    m = n["start"]
    t0 = time.perf_counter()
    for _ in range(m):
        await queries.enqueue("noop", None)
    figures.append(
        figure(
            "start",
            "one at a time",
            m / (time.perf_counter() - t0),
            "jobs/s",
            jobs=m,
            version=version,
        )
    )
    m = n["batched"]
    t0 = time.perf_counter()
    for offset in range(0, m, 500):
        k = min(500, m - offset)
        await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
    figures.append(
        figure(
            "start",
            "batched",
            m / (time.perf_counter() - t0),
            "jobs/s",
            jobs=m,
            batch=500,
            version=version,
        )
    )
    await conn.execute("DELETE FROM pgqueuer")

    m = n["e2e"] * 2
    for offset in range(0, m, 500):
        k = min(500, m - offset)
        await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
    worker_conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    before = await _commits(url)
    t0 = time.perf_counter()
    await qm.run(mode=QueueExecutionMode.drain, batch_size=10)
    seconds = time.perf_counter() - t0
    await worker_conn.close()
    after = await _commits(url)
    figures.append(
        figure(
            "e2e-1",
            "no-op job, 1 worker",
            m / seconds,
            "jobs/s",
            jobs=m,
            batch_size=10,
            version=version,
            seconds=round(seconds, 2),
        )
    )
    figures.append(
        figure(
            "commits", "commits per workflow", (after - before) / m, "xact", jobs=m, note="per job"
        )
    )
    await conn.close()
    emit(figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--size", default="small")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.url, args.size))
    except Exception as error:
        fail(error)
