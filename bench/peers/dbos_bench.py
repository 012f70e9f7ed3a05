"""DBOS Transact: a one-step workflow — enqueue throughput, end to end through a queue,
a three-step chain, and send -> recv wake latency (step start after ``DBOS.send``).

DBOS runs workflows inside the process that launched it (an executor thread pool),
so "end to end" here is one process enqueueing and draining its queue.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.peers import SIZES, emit, fail, figure, percentile


def _pending(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING')"
        ).fetchone()
        return int(row[0]) if row else 0


def _commits(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return int(row[0]) if row else 0


def _drain(url: str, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while _pending(url) > 0:
        if time.perf_counter() > deadline:
            raise RuntimeError("DBOS workflows still pending after the timeout")
        time.sleep(0.02)


def main(url: str, size: str) -> None:
    try:
        import dbos
        from dbos import DBOS, DBOSConfig
    except ImportError as error:
        fail(f"DBOS is not installed ({error}): pip install dbos")
        return
    n = SIZES[size]
    version = getattr(dbos, "__version__", None) or _dist_version("dbos")
    sqlalchemy_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    config: DBOSConfig = {
        "name": "legato-bench",
        "system_database_url": sqlalchemy_url,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def noop_step(value: int) -> int:
        return value

    @DBOS.step()
    def stamp_step() -> float:
        return time.time()

    @DBOS.workflow()
    def one(value: int) -> int:
        return noop_step(value)

    @DBOS.workflow()
    def three(value: int) -> int:
        return noop_step(noop_step(noop_step(value)))

    @DBOS.workflow()
    def waiter(value: int) -> tuple[float, float]:
        first = stamp_step()
        DBOS.recv("go", timeout_seconds=60)
        return first, stamp_step()

    DBOS.launch()
    queue = DBOS.register_queue("bench")
    figures: list[dict[str, Any]] = []
    try:
        for i in range(10):  # warm up
            queue.enqueue(one, i)
        _drain(url, 60)

        m = n["start"]
        t0 = time.perf_counter()
        for i in range(m):
            queue.enqueue(one, i)
        rate = m / (time.perf_counter() - t0)
        figures.append(
            figure(
                "start",
                "one at a time",
                rate,
                "wf/s",
                workflows=m,
                api="Queue.enqueue",
                version=version,
            )
        )
        _drain(url, 300)

        for label, workflow, m in (
            ("e2e-1", one, n["e2e"]),
            ("e2e-3", three, n["chain"]),
        ):
            before = _commits(url)
            t0 = time.perf_counter()
            for i in range(m):
                queue.enqueue(workflow, i)
            _drain(url, 300)
            seconds = time.perf_counter() - t0
            after = _commits(url)
            name = "one-step workflow" if label == "e2e-1" else "3-task chain"
            figures.append(
                figure(
                    label,
                    name,
                    m / seconds,
                    "wf/s",
                    workflows=m,
                    version=version,
                    settings="defaults, enqueue + drain in one process",
                    seconds=round(seconds, 2),
                )
            )
            if label == "e2e-1":
                figures.append(
                    figure(
                        "commits", "commits per workflow", (after - before) / m, "xact", workflows=m
                    )
                )

        starts: list[float] = []
        wakes: list[float] = []
        for i in range(n["wake"]):
            at = time.time()
            handle = DBOS.start_workflow(waiter, i)
            time.sleep(0.02)  # the workflow is in recv by now
            sent = time.time()
            DBOS.send(handle.workflow_id, i, "go")
            first, after_recv = handle.get_result()
            starts.append((first - at) * 1000)
            wakes.append((after_recv - sent) * 1000)
        for p in (50, 95, 99):
            figures.append(
                figure(
                    "wake",
                    f"p{p}",
                    percentile(wakes, p),
                    "ms",
                    samples=len(wakes),
                    what="send -> next step start",
                )
            )
        figures.append(
            figure(
                "wake",
                "start -> first step p50",
                percentile(starts, 50),
                "ms",
                samples=len(starts),
                api="DBOS.start_workflow (runs in-process)",
            )
        )
    finally:
        DBOS.destroy()
    emit(figures)


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--size", default="small")
    args = parser.parse_args()
    try:
        main(args.url, args.size)
    except Exception as error:
        fail(error)
