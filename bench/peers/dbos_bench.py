"""DBOS Transact, measured the way Legato is: a client process (``DBOSClient``) starts,
signals and watches; separate executor processes (``DBOS.launch()``) run the workflows.

* start: ``DBOSClient.enqueue`` one at a time, no executor running; batched:
  ``DBOSClient.enqueue_in_transaction``, 500 per transaction.
* e2e-1 / e2e-3: a warm fleet drains a backlog, as Legato's drains do: the executor
  processes are launched, a few workflows per process go through them, then the runs
  are enqueued in one transaction and the clock runs from its commit until no workflow
  is ENQUEUED or PENDING. The configuration (processes, ``worker_concurrency``, queue
  polling interval; the pool sized above the concurrency, executor threads unbounded, as
  DBOS defaults) is searched first on a smaller drain and the best one is used.
* wake: enqueued from the client, the first step's start stamped (start -> first step);
  ``DBOSClient.send`` -> the step after ``DBOS.recv`` (wake): client -> executor, one hop
  fewer than Legato's client -> decider -> worker.
* commits: bench.txcount's accounting, as for Legato: real transactions and write xids
  per workflow while draining and at 50 workflows/s from the client.

``python -m bench.peers.dbos_bench --url URL --size S [--server-log PATH]`` runs all of
it; ``... executor ...`` is one executor process (bench.peers.Proc's protocol).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from bench.peers import (
    LOW_LOAD_RATE,
    LOW_LOAD_SECONDS,
    SIZES,
    STATS_FLUSH_SECONDS,
    WARM_RUNS_PER_PROCESS,
    Proc,
    counters,
    emit,
    fail,
    figure,
    percentile,
    start_procs,
    statement_log,
)

QUEUE = "bench"
#: Waiting workflows hold a worker_concurrency slot in DBOS: they get a queue without a limit.
WAKE_QUEUE = "bench_wake"
BATCH = 500
MODULE = "bench.peers.dbos_bench"


@dataclass(frozen=True)
class Config:
    processes: int
    worker_concurrency: int
    polling_interval_sec: float

    @property
    def pool_size(self) -> int:
        return self.worker_concurrency + 10  # never the limit

    def args(self) -> list[str]:
        return [
            "--worker-concurrency",
            str(self.worker_concurrency),
            "--polling-interval",
            str(self.polling_interval_sec),
        ]


#: The space searched: what a user tuning DBOS for throughput on this machine would try.
GRID = [Config(p, c, i) for p, c, i in itertools.product((1, 2), (16, 32, 64), (0.1, 0.05))]
#: The best of the grid in this session's runs: the only configuration at size tiny.
DEFAULT = Config(2, 32, 0.1)


def _sa_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


# -- executor process --------------------------------------------------------------------------


def executor(url: str, worker_concurrency: int, polling_interval: float) -> None:
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "legato-bench",
        "system_database_url": _sa_url(url),
        "log_level": "WARNING",
        "executor_id": uuid.uuid4().hex,  # each process recovers only its own work
        "sys_db_pool_size": worker_concurrency + 10,
    }
    DBOS(config=config)

    @DBOS.step()
    def noop_step(value: int) -> int:
        return value

    @DBOS.step()
    def stamp_step() -> float:
        return time.time()

    @DBOS.workflow(name="bench_one")
    def one(value: int) -> int:
        return noop_step(value)

    @DBOS.workflow(name="bench_three")
    def three(value: int) -> int:
        return noop_step(noop_step(noop_step(value)))

    @DBOS.workflow(name="bench_waiter")
    def waiter(value: int) -> tuple[float, float]:
        first = stamp_step()
        DBOS.set_event("first", first)
        DBOS.recv("go", timeout_seconds=60)
        return first, stamp_step()

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    DBOS.launch()
    DBOS.register_queue(  # needs the launched system database
        QUEUE, worker_concurrency=worker_concurrency, polling_interval_sec=polling_interval
    )
    DBOS.register_queue(WAKE_QUEUE, polling_interval_sec=polling_interval)
    print("launched", flush=True)
    sys.stdin.read()  # until the orchestrator ends our stdin
    DBOS.destroy()


# -- orchestrator ------------------------------------------------------------------------------


class Bench:
    def __init__(self, url: str, server_log: str | None) -> None:
        import sqlalchemy as sa
        from dbos import DBOSClient

        self.url = url
        self.server_log = server_log
        self.client = DBOSClient(system_database_url=_sa_url(url))
        self.engine = sa.create_engine(_sa_url(url))

    def close(self) -> None:
        self.client.destroy()
        self.engine.dispose()

    def options(self, workflow: str, queue: str = QUEUE) -> Any:
        return {"workflow_name": workflow, "queue_name": queue}

    def enqueue_batched(self, workflow: str, n: int, batch: int = BATCH) -> None:
        """``n`` runs of ``workflow``, ``batch`` per transaction."""
        for offset in range(0, n, batch):
            with self.engine.begin() as conn:
                for i in range(offset, min(n, offset + batch)):
                    self.client.enqueue_in_transaction(conn, self.options(workflow), i)

    def pending(self) -> int:
        import sqlalchemy as sa

        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM dbos.workflow_status "
                        "WHERE status IN ('ENQUEUED', 'PENDING')"
                    )
                ).scalar_one()
            )

    def clear(self) -> None:
        """Forget the workflows the start scenario enqueued (no executor ran them)."""
        import sqlalchemy as sa

        with self.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM dbos.workflow_status WHERE status = 'ENQUEUED'"))

    def launch(self, config: Config) -> list[Proc]:
        procs = start_procs(MODULE, config.processes, "executor", "--url", self.url, *config.args())
        for proc in procs:
            proc.go()
        for proc in procs:
            proc.wait_for("launched")
        return procs

    def drain(self, config: Config, workflow: str, n: int, count: bool = False) -> dict[str, Any]:
        # Logging applies to sessions opened after it is set: before the executors launch.
        window = asyncio.run(statement_log(self.url, self.server_log, True)) if count else None
        procs = self.launch(config)
        try:
            self.enqueue_batched(workflow, WARM_RUNS_PER_PROCESS * config.processes)
            self._wait_idle()
            time.sleep(STATS_FLUSH_SECONDS)
            before = asyncio.run(counters(self.url))
            if window is not None:
                window.open()
            self.enqueue_batched(workflow, n, batch=n)  # the backlog in one transaction
            t0 = time.perf_counter()
            deadline = t0 + max(120.0, n / 10)
            while self.pending() > 0:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"DBOS: workflows still pending after {deadline - t0:.0f}s")
                time.sleep(0.02)
            seconds = time.perf_counter() - t0
        finally:
            for proc in procs:
                proc.stop()
        after = asyncio.run(counters(self.url))
        result: dict[str, Any] = {
            "rate": n / seconds,
            "seconds": round(seconds, 2),
            "commits": (after[0] - before[0]) / n,
            "xids": (after[1] - before[1]) / n,
        }
        if window is not None:
            result["transactions"] = window.count() / n
            asyncio.run(statement_log(self.url, self.server_log, False))
        return result

    def low_load(self, config: Config, seconds: float) -> dict[str, Any]:
        window = asyncio.run(statement_log(self.url, self.server_log, True))
        from dbos import DBOSClient

        client = DBOSClient(system_database_url=_sa_url(self.url))  # a logged connection
        procs = self.launch(Config(1, config.worker_concurrency, config.polling_interval_sec))
        n = max(1, round(LOW_LOAD_RATE * seconds))
        try:
            client.enqueue(self.options("bench_one"), -1)  # warm the client
            self._wait_idle()
            before = asyncio.run(counters(self.url))
            if window is not None:
                window.open()
            t0 = time.perf_counter()
            for i in range(n):
                client.enqueue(self.options("bench_one"), i)
                time.sleep(max(0.0, t0 + (i + 1) / LOW_LOAD_RATE - time.perf_counter()))
            self._wait_idle()
            after = asyncio.run(counters(self.url))
            transactions = window.count() if window is not None else None
        finally:
            for proc in procs:
                proc.stop()
            client.destroy()
            asyncio.run(statement_log(self.url, self.server_log, False))
        return {
            "n": n,
            "xids": (after[1] - before[1]) / n,
            "transactions": None if transactions is None else transactions / n,
        }

    def _wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.perf_counter() + timeout
        while self.pending() > 0:
            if time.perf_counter() > deadline:
                raise RuntimeError("DBOS: workflows still pending")
            time.sleep(0.02)

    def wake(
        self, config: Config, n: int, spacing: float = 0.02
    ) -> tuple[list[float], list[float]]:
        procs = self.launch(Config(1, config.worker_concurrency, config.polling_interval_sec))
        try:
            started: dict[str, float] = {}
            for i in range(-1, n):  # -1 warms up
                at = time.time()
                handle: Any = self.client.enqueue(self.options("bench_waiter", WAKE_QUEUE), i)
                started[handle.workflow_id] = at
                time.sleep(spacing)
            for workflow_id in started:  # all are in recv once their event is set
                self.client.get_event(workflow_id, "first", timeout_seconds=60)
            sent: dict[str, float] = {}
            for workflow_id in started:
                sent[workflow_id] = time.time()
                self.client.send(workflow_id, 1, "go")
                time.sleep(spacing)
            firsts, wakes = [], []
            for k, (workflow_id, at) in enumerate(started.items()):
                stamps: tuple[float, float] = self.client.retrieve_workflow(
                    workflow_id
                ).get_result()
                first, after = stamps
                if k:
                    firsts.append((first - at) * 1000)
                    wakes.append((after - sent[workflow_id]) * 1000)
        finally:
            for proc in procs:
                proc.stop()
        return firsts, wakes


def main(url: str, size: str, server_log: str | None) -> None:
    try:
        import dbos  # noqa: F401
    except ImportError as error:
        fail(f"DBOS is not installed ({error}): pip install dbos")
        return
    n = SIZES[size]
    version = _dist_version("dbos")
    bench = Bench(url, server_log)
    figures: list[dict[str, Any]] = []
    try:
        for proc in bench.launch(DEFAULT):  # creates the system database's tables
            proc.stop()

        m = n["start"]
        t0 = time.perf_counter()
        for i in range(m):
            bench.client.enqueue(bench.options("bench_one"), i)
        rate = m / (time.perf_counter() - t0)
        figures.append(
            figure("start", "one at a time", rate, "wf/s", workflows=m, api="DBOSClient.enqueue")
        )
        m = n["batched"]
        t0 = time.perf_counter()
        bench.enqueue_batched("bench_one", m)
        rate = m / (time.perf_counter() - t0)
        figures.append(
            figure(
                "start",
                "batched",
                rate,
                "wf/s",
                workflows=m,
                api=f"DBOSClient.enqueue_in_transaction, {BATCH} per transaction",
            )
        )
        bench.clear()

        best, tried = DEFAULT, {}
        if size != "tiny":
            for config in GRID:
                tried[config] = bench.drain(config, "bench_one", max(100, n["e2e"] // 2))["rate"]
                figures.append(
                    figure("tuning", _label(config), tried[config], "wf/s", **asdict(config))
                )
            best = max(tried, key=lambda c: tried[c])
        shown = {**asdict(best), "pool_size": best.pool_size, "version": version}
        for label, workflow, name, m in (
            ("e2e-1", "bench_one", "one-step workflow", n["e2e"]),
            ("e2e-3", "bench_three", "3-task chain", n["chain"]),
        ):
            d = bench.drain(best, workflow, m)
            figures.append(
                figure(label, name, d["rate"], "wf/s", workflows=m, seconds=d["seconds"], **shown)
            )
            if label == "e2e-1":
                figures.append(
                    figure(
                        "commits", "xact_commit per wf, draining", d["commits"], "xact", workflows=m
                    )
                )
        d = bench.drain(best, "bench_one", n["e2e"], count=True)
        figures.append(
            figure(
                "commits",
                "real transactions per wf, draining",
                d.get("transactions", d["xids"]),
                "xact",
                workflows=n["e2e"],
                **shown,
            )
        )
        figures.append(figure("commits", "write xids per wf, draining", d["xids"], "xid"))
        low = bench.low_load(best, LOW_LOAD_SECONDS[size])
        if low["transactions"] is not None:
            figures.append(
                figure(
                    "commits",
                    "real transactions per run, low load",
                    low["transactions"],
                    "xact",
                    runs=low["n"],
                    rate=f"{LOW_LOAD_RATE}/s",
                    includes="the enqueue, and the idle executor's polls in the window",
                )
            )
        figures.append(figure("commits", "write xids per run, low load", low["xids"], "xid"))

        firsts, wakes = bench.wake(best, n["wake"])
        for label, samples in (("signal -> next task", wakes), ("start -> first task", firsts)):
            for p in (50, 95, 99):
                figures.append(
                    figure(
                        "wake",
                        f"{label} p{p}",
                        percentile(samples, p),
                        "ms",
                        samples=len(samples),
                        hops="DBOSClient (this process) -> 1 executor process",
                        **{**shown, "processes": 1},
                    )
                )
    finally:
        bench.close()
    emit(figures)


def _label(config: Config) -> str:
    return (
        f"{config.processes} proc x wc {config.worker_concurrency}, "
        f"poll {config.polling_interval_sec}s"
    )


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", default="bench", choices=("bench", "executor"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--size", default="small")
    parser.add_argument("--server-log")
    parser.add_argument("--worker-concurrency", type=int, default=DEFAULT.worker_concurrency)
    parser.add_argument("--polling-interval", type=float, default=DEFAULT.polling_interval_sec)
    args = parser.parse_args()
    if args.role == "executor":
        executor(args.url, args.worker_concurrency, args.polling_interval)
        sys.exit(0)
    try:
        main(args.url, args.size, args.server_log)
    except Exception as error:
        fail(error)
