"""pgqueuer, measured the way Legato is: a client (this process) enqueues; separate
worker processes (``QueueManager.run``) consume no-op jobs. A pure queue: the ceiling
a workflow engine pays extra on top of.

* start: ``Queries.enqueue`` one at a time and batched (500), no worker running.
* e2e-1: a warm fleet drains a backlog, as Legato's drains do: the worker processes
  run, a few jobs per process go through them, then the jobs are enqueued in one
  transaction and the clock runs from its commit until the queue is empty. Processes,
  ``batch_size`` and ``max_concurrent_tasks`` are searched on a smaller drain first;
  the best is used.
* start -> first job: one job every 20 ms from the client; the job stamps its start.
  No wake figure: pgqueuer has no wait-for-event.
* commits: bench.txcount's accounting, as for Legato, per job.

``... worker ...`` is one worker process (bench.peers.Proc's protocol).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.peers import (
    LOW_LOAD_RATE,
    LOW_LOAD_SECONDS,
    SIZES,
    STATS_FLUSH_SECONDS,
    WARM_RUNS_PER_PROCESS,
    counters,
    emit,
    fail,
    figure,
    percentile,
    start_procs,
    statement_log,
)

MODULE = "bench.peers.pgqueuer_bench"
BATCH = 500


@dataclass(frozen=True)
class Config:
    processes: int
    batch_size: int
    max_concurrent_tasks: int

    def args(self) -> list[str]:
        return [
            "--batch-size",
            str(self.batch_size),
            "--max-concurrent-tasks",
            str(self.max_concurrent_tasks),
        ]


#: batch_size stays at or below max_concurrent_tasks (a larger batch stalled a drain here).
GRID = [
    Config(p, b, c) for p, (b, c) in itertools.product((1, 2), ((10, 32), (10, 128), (50, 128)))
]
DEFAULT = Config(1, 10, 32)


# -- worker process ----------------------------------------------------------------------------


async def worker(url: str, batch_size: int, max_concurrent_tasks: int) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    stamps: dict[str, float] = {}

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    @qm.entrypoint("stamp")
    async def stamp(job: Any) -> None:
        stamps[job.payload.decode()] = time.time()

    print("ready", flush=True)
    if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
        return
    running = asyncio.create_task(
        qm.run(batch_size=batch_size, max_concurrent_tasks=max_concurrent_tasks)
    )
    await asyncio.to_thread(sys.stdin.read)  # until the orchestrator ends our stdin
    qm.shutdown.set()
    await running
    await conn.close()
    print(json.dumps(stamps), flush=True)


# -- orchestrator ------------------------------------------------------------------------------


async def _queued(conn: Any) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM pgqueuer"))


async def _wait_empty(conn: Any, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while await _queued(conn) > 0:
        if time.perf_counter() > deadline:
            raise RuntimeError("pgqueuer: jobs still queued after the timeout")
        await asyncio.sleep(0.02)


async def _enqueue_batched(queries: Any, entrypoint: str, n: int) -> None:
    for offset in range(0, n, BATCH):
        k = min(BATCH, n - offset)
        await queries.enqueue([entrypoint] * k, [None] * k, [0] * k)


async def _drain(
    url: str, conn: Any, queries: Any, config: Config, n: int, server_log: str | None = None
) -> dict[str, Any]:
    # Logging applies to sessions opened after it is set: before the workers connect.
    window = await statement_log(url, server_log, True) if server_log else None
    procs = await asyncio.to_thread(
        start_procs, MODULE, config.processes, "worker", "--url", url, *config.args()
    )
    try:
        for proc in procs:
            proc.go()
        await _enqueue_batched(queries, "noop", WARM_RUNS_PER_PROCESS * config.processes)
        await _wait_empty(conn, 60)
        await asyncio.sleep(STATS_FLUSH_SECONDS)
        before = await counters(url)
        if window is not None:
            window.open()
        async with conn.transaction():
            await _enqueue_batched(queries, "noop", n)
        t0 = time.perf_counter()
        await _wait_empty(conn, max(120.0, n / 10))
        seconds = time.perf_counter() - t0
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.stop)
    after = await counters(url)
    result: dict[str, Any] = {
        "rate": n / seconds,
        "seconds": round(seconds, 2),
        "commits": (after[0] - before[0]) / n,
        "xids": (after[1] - before[1]) / n,
    }
    if window is not None:
        result["transactions"] = window.count() / n
        await statement_log(url, server_log, False)
    return result


async def main(url: str, size: str, server_log: str | None) -> None:
    try:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries
    except ImportError as error:
        fail(f"pgqueuer is not installed ({error}): pip install pgqueuer")
        return
    n = SIZES[size]
    version = _dist_version("pgqueuer")
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    figures: list[dict[str, Any]] = []

    m = n["start"]
    t0 = time.perf_counter()
    for _ in range(m):
        await queries.enqueue("noop", None)
    rate = m / (time.perf_counter() - t0)
    figures.append(figure("start", "one at a time", rate, "jobs/s", jobs=m, version=version))
    m = n["batched"]
    t0 = time.perf_counter()
    await _enqueue_batched(queries, "noop", m)
    rate = m / (time.perf_counter() - t0)
    figures.append(figure("start", "batched", rate, "jobs/s", jobs=m, batch=BATCH))
    await conn.execute("DELETE FROM pgqueuer")

    best, tried = DEFAULT, {}
    if size != "tiny":
        for config in GRID:
            tried[config] = (await _drain(url, conn, queries, config, n["e2e"]))["rate"]
            figures.append(
                figure("tuning", _label(config), tried[config], "jobs/s", **asdict(config))
            )
        best = max(tried, key=lambda c: tried[c])
    shown = {**asdict(best), "version": version}
    m = n["e2e"] * 2
    d = await _drain(url, conn, queries, best, m)
    figures.append(
        figure("e2e-1", "no-op job", d["rate"], "jobs/s", jobs=m, seconds=d["seconds"], **shown)
    )
    figures.append(figure("commits", "xact_commit per wf, draining", d["commits"], "xact", jobs=m))
    d = await _drain(url, conn, queries, best, m, server_log)
    figures.append(
        figure(
            "commits",
            "real transactions per wf, draining",
            d.get("transactions", d["xids"]),
            "xact",
            jobs=m,
            **shown,
        )
    )
    figures.append(figure("commits", "write xids per wf, draining", d["xids"], "xid"))

    low, firsts = await _low_load_and_first_job(
        url, best, LOW_LOAD_SECONDS[size], n["wake"], server_log
    )
    if low["transactions"] is not None:
        figures.append(
            figure(
                "commits",
                "real transactions per run, low load",
                low["transactions"],
                "xact",
                jobs=low["n"],
                rate=f"{LOW_LOAD_RATE}/s",
                includes="the enqueue, and the idle worker's polls in the window",
            )
        )
    figures.append(figure("commits", "write xids per run, low load", low["xids"], "xid"))
    for p in (50, 95, 99):
        figures.append(
            figure(
                "wake",
                f"start -> first task p{p}",
                percentile(firsts, p),
                "ms",
                samples=len(firsts),
                hops="client (this process) -> 1 worker process",
                **{**shown, "processes": 1},
            )
        )
    await conn.close()
    emit(figures)


async def _low_load_and_first_job(
    url: str, config: Config, seconds: float, samples: int, server_log: str | None
) -> tuple[dict[str, Any], list[float]]:
    """With one worker running: jobs at LOW_LOAD_RATE/s (counted), then ``samples``
    stamped jobs 20 ms apart (start -> first job)."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    window = await statement_log(url, server_log, True)
    conn = await asyncpg.connect(url)  # after the ALTER: its statements are logged
    queries = Queries(AsyncpgDriver(conn))
    one = Config(1, config.batch_size, config.max_concurrent_tasks)
    procs = await asyncio.to_thread(start_procs, MODULE, 1, "worker", "--url", url, *one.args())
    procs[0].go()
    n = max(1, round(LOW_LOAD_RATE * seconds))
    enqueued: dict[str, float] = {}
    try:
        await queries.enqueue("noop", None)  # warm
        await _wait_empty(conn, 60)
        before = await counters(url)
        if window is not None:
            window.open()
        t0 = time.perf_counter()
        for i in range(n):
            await queries.enqueue("noop", None)
            await asyncio.sleep(max(0.0, t0 + (i + 1) / LOW_LOAD_RATE - time.perf_counter()))
        await _wait_empty(conn, 60)
        after = await counters(url)
        transactions = window.count() if window is not None else None
        for i in range(samples):
            enqueued[str(i)] = time.time()
            await queries.enqueue("stamp", str(i).encode())
            await asyncio.sleep(0.02)
        await _wait_empty(conn, 60)
    finally:
        last = await asyncio.to_thread(procs[0].stop)
        await conn.close()
        await statement_log(url, server_log, False)
    stamps = json.loads(last) if last.startswith("{") else {}
    firsts = [(stamps[k] - at) * 1000 for k, at in enqueued.items() if k in stamps]
    low = {
        "n": n,
        "xids": (after[1] - before[1]) / n,
        "transactions": None if transactions is None else transactions / n,
    }
    return low, firsts


def _label(config: Config) -> str:
    return (
        f"{config.processes} proc x batch {config.batch_size}, {config.max_concurrent_tasks} tasks"
    )


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", default="bench", choices=("bench", "worker"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--size", default="small")
    parser.add_argument("--server-log")
    parser.add_argument("--batch-size", type=int, default=DEFAULT.batch_size)
    parser.add_argument("--max-concurrent-tasks", type=int, default=DEFAULT.max_concurrent_tasks)
    args = parser.parse_args()
    if args.role == "worker":
        asyncio.run(worker(args.url, args.batch_size, args.max_concurrent_tasks))
        sys.exit(0)
    try:
        asyncio.run(main(args.url, args.size, args.server_log))
    except Exception as error:
        fail(error)
