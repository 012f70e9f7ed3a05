"""Legato's scenarios: start (with the bare-commit floor), e2e-1, e2e-3, wake, latency,
history, claims, commits (real transactions per run), metrics overhead."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.flows import Go, app, chain3, fanout10, one, one_tx, wake
from bench.harness import Figure, Server, Target, percentile, probe_engine
from bench.lived_in import generate_history
from bench.peers import STATS_FLUSH_SECONDS, WARM_RUNS_PER_PROCESS
from bench.procs import Fleet
from legato import App, Client, Workflow
from legato.engine.loops.decider import DeciderLoop
from legato.engine.loops.worker import Worker
from legato.schema import Runs, RunStatus, Shards, Tasks, TaskState

BATCH = 500


@dataclass(frozen=True)
class Sizes:
    start_one: int
    start_batched: int
    e2e_1: int
    chain3: int
    fanout10: int
    wake: int
    history_runs: int
    history_samples: int
    low_load_seconds: float


SIZES = {
    "tiny": Sizes(20, 200, 20, 10, 4, 5, 500, 5, 0.5),
    "small": Sizes(300, 3_000, 500, 200, 40, 50, 20_000, 100, 3.0),
    "full": Sizes(1_000, 30_000, 5_000, 1_000, 100, 200, 1_000_000, 400, 5.0),
}

#: Runs per second of the low-load commits scenario (one at a time from one client).
LOW_LOAD_RATE = 50


@dataclass
class Options:
    size: Sizes
    cores: int
    profile_dir: Path | None = None
    concurrency: int = 64
    #: How long the held-snapshot scenario holds its snapshot (None: its default).
    held_seconds: float | None = None


@dataclass(frozen=True)
class Counters:
    commits: int
    xid: int


async def counters(engine: AsyncEngine) -> Counters:
    """This database's committed transactions (pg_stat) and the cluster's next xid."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = (
            await conn.execute(
                text(
                    "SELECT xact_commit, "
                    "pg_snapshot_xmax(pg_current_snapshot())::text::bigint "
                    "FROM pg_stat_database WHERE datname = current_database()"
                )
            )
        ).one()
    return Counters(int(row[0]), int(row[1]))


async def _running(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(func.count()).select_from(Runs.table).where(Runs.status == RunStatus.RUNNING)
        )
        return int(result.scalar_one())


async def _statuses(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        result = await conn.execute(select(Runs.status, func.count()).group_by(Runs.status))
        return {str(status): int(n) for status, n in result}


# -- start, and the bare commit it is compared with ------------------------------------------


class BareCommit:
    """The floor for one client: a one-row ``INSERT`` committed from asyncpg (autocommit),
    on the same server, measured in the same run as the figure it is compared with."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.table = f'"{target.schema}".bench_bare_commit'
        self._conn: asyncpg.Connection | None = None

    async def open(self) -> BareCommit:
        self._conn = await asyncpg.connect(self.target.direct_url)
        await self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self.table} "
            "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int NOT NULL)"
        )
        await self.timed(20)  # warm: the prepared statement, the page
        return self

    async def timed(self, n: int, gap: float = 0.0) -> list[float]:
        """Commit ``n`` inserts one after the other, each ``gap`` seconds after the last
        returned; each one's latency in ms. Back to back (no gap) is the floor the
        targets are set against; spaced as the wake samples are, it is what a commit
        costs once client and server have waited idle (on a VM, a flush that wakes an
        idle virtual CPU costs several times one issued back to back)."""
        assert self._conn is not None
        samples = []
        statement = f"INSERT INTO {self.table} (v) VALUES ($1)"
        for i in range(n):
            if gap:
                await asyncio.sleep(gap)
            t0 = time.perf_counter()
            await self._conn.execute(statement, i)
            samples.append((time.perf_counter() - t0) * 1000)
        return samples

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


def bare_figures(scenario: str, samples: list[float]) -> list[Figure]:
    settings = {"commits": len(samples), "client": "1 asyncpg connection, autocommit"}
    return [
        Figure(scenario, "bare INSERT commit, one client", _rate(samples), "/s", settings),
        Figure(scenario, "bare INSERT commit p50", percentile(samples, 50), "ms", settings),
    ]


def multiple(scenario: str, name: str, value: float, floor: float) -> Figure:
    """``value`` as a multiple of the bare commit's (a rate ratio or a latency multiple)."""
    return Figure(scenario, name, value / floor if floor else float("nan"), "x", {})


def _rate(samples_ms: list[float]) -> float:
    return len(samples_ms) / (sum(samples_ms) / 1000) if samples_ms else float("nan")


async def scenario_start(server: Server, opts: Options) -> list[Figure]:
    """Sequential starts interleaved block by block with bare commits (so both see the
    same machine), then batched starts."""
    target = await server.fresh("start")
    engine = target.engine()
    bare = await BareCommit(target).open()
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            for i in range(20):  # warm: version cache, pool, statement cache
                await client.start(one, i)
            n = opts.size.start_one
            blocks = min(10, n)
            starts: list[float] = []
            commits: list[float] = []
            for block in range(blocks):
                for i in range(n // blocks):
                    t0 = time.perf_counter()
                    await client.start(one, block * n + i)
                    starts.append((time.perf_counter() - t0) * 1000)
                commits += await bare.timed(n // blocks)
            m = opts.size.start_batched
            t0 = time.perf_counter()
            for offset in range(0, m, BATCH):
                await client.start_many(one, list(range(offset, min(m, offset + BATCH))))
            batched = m / (time.perf_counter() - t0)
    finally:
        await bare.close()
        await engine.dispose()
    sequential = _rate(starts)
    one_settings = {"runs": len(starts), "client": 1, "p50 ms": round(percentile(starts, 50), 2)}
    return [
        Figure("start", "one at a time", sequential, "runs/s", one_settings),
        *bare_figures("start", commits),
        multiple("start", "one at a time / bare commit rate", sequential, _rate(commits)),
        Figure("start", "batched (start_many)", batched, "runs/s", {"runs": m, "batch": BATCH}),
    ]


# -- end to end ------------------------------------------------------------------------------


@dataclass
class Drained:
    rate: float
    seconds: float
    layout: str
    commits_per_wf: float
    xids_per_wf: float
    transactions_per_wf: float | None
    statuses: dict[str, int]


async def drain(
    server: Server,
    opts: Options,
    workflow: Workflow[int, Any],
    n: int,
    *,
    workers: int,
    deciders: int,
    label: str,
    metrics: bool = False,
    count_transactions: bool = False,
) -> Drained:
    """Drain a backlog of ``n`` runs with a warm fleet: time from the commit that makes
    the backlog visible until every run has finished.

    The fleet is started first and warmed (its runtimes up, every shard key of every
    role leased, a few runs drained so each process has built its statements), so the
    window measures the steady drain, not process start-up; the ``n`` runs are then
    started in one transaction and the window opens at its commit.
    ``count_transactions`` logs the database's statements (bench.txcount) to count the
    real transactions of the drain; it slows the server, so throughput figures leave it off.
    """
    target = await server.fresh(label)
    engine = target.engine()
    probe = probe_engine(target)
    window = await server.statement_log(target) if count_transactions else None
    fleet = Fleet(
        target,
        workers=workers,
        deciders=deciders,
        concurrency=opts.concurrency,
        profile_dir=opts.profile_dir,
        profile_label=f"{label}-",
        metrics=metrics,
    )
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await asyncio.to_thread(fleet.start)
            try:
                fleet.release()
                await asyncio.to_thread(fleet.wait_running)
                await _warm_fleet(client, probe, target.schema, workflow, workers + deciders)
                before = await counters(probe)
                if window is not None:
                    window.open()
                async with engine.begin() as conn:
                    for offset in range(0, n, BATCH):
                        inputs = list(range(offset, min(n, offset + BATCH)))
                        await client.start_many(workflow, inputs, connection=conn)
                    t0 = time.perf_counter()
                deadline = t0 + max(120.0, n / 20)
                while await _running(probe) > 0:
                    if time.perf_counter() > deadline:
                        raise RuntimeError(
                            f"{label}: runs still running after {deadline - t0:.0f}s"
                        )
                    await asyncio.sleep(0.02)
                seconds = time.perf_counter() - t0
            finally:
                await asyncio.to_thread(fleet.shutdown)
        after = await counters(probe)  # the processes have exited: their stats are flushed
        transactions = window.count() if window is not None else None
        statuses = await _statuses(probe)
    finally:
        await probe.dispose()
        await engine.dispose()
    return Drained(
        rate=n / seconds,
        seconds=seconds,
        layout=fleet.layout,
        commits_per_wf=(after.commits - before.commits) / n,
        xids_per_wf=(after.xid - before.xid) / n,
        transactions_per_wf=None if transactions is None else transactions / n,
        statuses=statuses,
    )


async def _warm_fleet(
    client: Client,
    probe: AsyncEngine,
    schema: str,
    workflow: Workflow[int, Any],
    processes: int,
) -> None:
    """Wait until every role's shard keys are leased to its processes, then drain a few
    runs of ``workflow`` through the fleet."""
    await _wait_until(lambda: _keys_settled(probe, schema), 60, "the shard keys to be leased")
    handles = await client.start_many(workflow, list(range(WARM_RUNS_PER_PROCESS * processes)))
    for handle in handles:
        await handle.result(timeout=60)
    await asyncio.sleep(STATS_FLUSH_SECONDS)


async def _keys_settled(probe: AsyncEngine, schema: str) -> bool:
    """Every role's keys are held, each member at its quota (no key changing hands).
    Plain SQL on purpose: the same check runs against trees from before shard keys."""
    owners = f'"{schema}".shard_owners'
    async with probe.connect() as conn:
        found = await conn.execute(text("SELECT to_regclass(:t)"), {"t": owners})
        if found.scalar() is None:
            return True  # a tree from before shard keys: nothing to lease
        count = (
            await conn.execute(text(f'SELECT shard_count FROM "{schema}".installation'))
        ).scalar_one()
        rows = await conn.execute(
            text(f"SELECT role, array_agg(cardinality(shards)) FROM {owners} GROUP BY role")
        )
        for _role, held in rows:
            if sum(held) != count or min(held) < count // len(held):
                return False
        return True


def _drained_settings(d: Drained, n: int) -> dict[str, Any]:
    failed = {k: v for k, v in d.statuses.items() if k != "SUCCEEDED"}
    settings: dict[str, Any] = {"runs": n, "layout": d.layout, "seconds": round(d.seconds, 2)}
    if failed:
        settings["NOT SUCCEEDED"] = failed
    return settings


async def scenario_e2e_1(server: Server, opts: Options) -> list[Figure]:
    n = opts.size.e2e_1
    figures: list[Figure] = []
    layouts = [("1 worker", 1, 1), ("worker per core", opts.cores, opts.cores)]
    saturated: Drained | None = None
    for name, workers, deciders in layouts:
        d = await drain(
            server, opts, one, n, workers=workers, deciders=deciders, label=f"e2e1-w{workers}"
        )
        figures.append(Figure("e2e-1", name, d.rate, "wf/s", _drained_settings(d, n)))
        if saturated is None or d.rate > saturated.rate:
            saturated = d
    assert saturated is not None
    figures.append(
        Figure(
            "commits",
            "xact_commit per wf, draining",
            saturated.commits_per_wf,
            "xact",
            {
                "runs": n,
                "layout": saturated.layout,
                "note": "pg_stat_database, counts NOTIFY deliveries",
                "write xids per wf": round(saturated.xids_per_wf, 3),
            },
        )
    )
    figures.append(await _e2e_1_transactional(server, opts, n))
    return figures


# A transactional attempt holds one of its worker's pooled connections (20 by default)
# while it runs: more slots than connections would only queue them on the pool.
TRANSACTIONAL_CONCURRENCY = 16


async def _e2e_1_transactional(server: Server, opts: Options, n: int) -> Figure:
    """The one-task workflow whose task is transactional, a worker and decider per core."""
    tx_opts = replace(opts, concurrency=min(opts.concurrency, TRANSACTIONAL_CONCURRENCY))
    cores = opts.cores
    d = await drain(server, tx_opts, one_tx, n, workers=cores, deciders=cores, label="e2e1-tx")
    settings = _drained_settings(d, n)
    settings["commits per wf"] = round(d.commits_per_wf, 2)
    settings["concurrency"] = tx_opts.concurrency
    return Figure("e2e-1", "transactional task, worker per core", d.rate, "wf/s", settings)


async def scenario_commits(server: Server, opts: Options) -> list[Figure]:
    """Real transactions per one-task run (bench.txcount): while draining a backlog
    (the batched path), and at low load (runs started one at a time at
    :data:`LOW_LOAD_RATE`/s, each decided, claimed and reported on its own)."""
    n = opts.size.e2e_1
    d = await drain(
        server, opts, one, n, workers=1, deciders=1, label="commits", count_transactions=True
    )
    figures = [
        Figure(
            "commits",
            "real transactions per wf, draining",
            d.transactions_per_wf if d.transactions_per_wf is not None else d.xids_per_wf,
            "xact",
            {
                "runs": n,
                "layout": d.layout,
                "counted by": "statement log" if d.transactions_per_wf is not None else "xids",
            },
        ),
        Figure("commits", "write xids per wf, draining", d.xids_per_wf, "xid", {"runs": n}),
    ]
    for one_process in (False, True):
        figures += await _low_load_commits(server, opts, one_process)
    return figures


#: Appended to a figure's name when measured on one process running the decider, the
#: worker and the timer (decisions hand attempts to that process's worker in memory);
#: the names without it are the 1 worker + 1 decider process layout's.
ONE_PROCESS = ", one process"


def _fleet(target: Target, opts: Options, one_process: bool, label: str = "") -> Fleet:
    """The latency and low-load layout: 1 worker + 1 decider process, or one process
    with every role."""
    return Fleet(
        target,
        workers=0 if one_process else 1,
        deciders=0 if one_process else 1,
        both=1 if one_process else 0,
        concurrency=opts.concurrency,
        profile_dir=opts.profile_dir,
        profile_label=label + ("1p-" if one_process else ""),
    )


async def _low_load_commits(server: Server, opts: Options, one_process: bool) -> list[Figure]:
    target = await server.fresh("lowload-1p" if one_process else "lowload")
    window = await server.statement_log(target)
    engine = target.engine()
    probe = probe_engine(target)
    fleet = _fleet(target, opts, one_process, "lowload-")
    suffix = ONE_PROCESS if one_process else ""
    n = max(1, round(LOW_LOAD_RATE * opts.size.low_load_seconds))
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await client.start(one, -1)  # warm the client outside the window
            await asyncio.to_thread(fleet.start)
            fleet.release()
            await _wait_until(lambda: _none_running(probe), 60, "the warm-up run")
            before = await counters(probe)
            if window is not None:
                window.open()
            t0 = time.perf_counter()
            for i in range(n):
                await client.start(one, i)
                await asyncio.sleep(max(0.0, t0 + (i + 1) / LOW_LOAD_RATE - time.perf_counter()))
            await _wait_until(lambda: _none_running(probe), 60, "the low-load runs")
            seconds = time.perf_counter() - t0
            after = await counters(probe)
            transactions = window.count() if window is not None else None
    finally:
        await asyncio.to_thread(fleet.shutdown)
        await probe.dispose()
        await engine.dispose()
    settings: dict[str, Any] = {
        "runs": n,
        "rate": f"{LOW_LOAD_RATE}/s",
        "seconds": round(seconds, 1),
        "layout": fleet.layout,
        "includes": "the start, and the idle loops' polls in the window",
    }
    figures = [
        Figure(
            "commits",
            f"write xids per run, low load{suffix}",
            (after.xid - before.xid) / n,
            "xid",
            {},
        )
    ]
    if transactions is not None:
        figures.insert(
            0,
            Figure(
                "commits",
                f"real transactions per run, low load{suffix}",
                transactions / n,
                "xact",
                settings,
            ),
        )
    else:
        figures[0].settings = settings
    return figures


async def scenario_metrics(server: Server, opts: Options) -> list[Figure]:
    """e2e-1 on one worker + one decider process with metrics off and on
    (``legato.observability.enable_metrics()`` in every process), alternated twice."""
    n = opts.size.e2e_1
    rates: dict[bool, list[float]] = {False: [], True: []}
    for metrics in (False, True, False, True):
        d = await drain(
            server, opts, one, n, workers=1, deciders=1, label="metrics", metrics=metrics
        )
        rates[metrics].append(d.rate)
    off, on = max(rates[False]), max(rates[True])
    settings = {"runs": n, "drains": "off, on, off, on; best of each"}
    return [
        Figure("metrics", "e2e-1, metrics off", off, "wf/s", settings),
        Figure("metrics", "e2e-1, metrics on", on, "wf/s", settings),
        Figure("metrics", "metrics on / off (1 - it is the overhead)", on / off, "x", settings),
    ]


async def scenario_e2e_3(server: Server, opts: Options) -> list[Figure]:
    figures = []
    workers, deciders = opts.cores, opts.cores
    for name, workflow, n in (
        ("3-task chain", chain3, opts.size.chain3),
        ("fan-out 10 + join", fanout10, opts.size.fanout10),
    ):
        d = await drain(
            server, opts, workflow, n, workers=workers, deciders=deciders, label=f"e2e3-{name[:5]}"
        )
        settings = _drained_settings(d, n)
        settings["commits per wf"] = round(d.commits_per_wf, 2)
        figures.append(Figure("e2e-3", name, d.rate, "wf/s", settings))
    return figures


# -- wake ------------------------------------------------------------------------------------


async def _wait_until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not await check():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def scenario_wake(server: Server, opts: Options) -> list[Figure]:
    """Start-to-first-task and signal-to-next-task latency, measured one run at a time,
    and each p50 as a multiple of a bare commit's p50 measured right after; on 1 worker +
    1 decider process, then on one process with every role."""
    figures: list[Figure] = []
    for one_process in (False, True):
        figures += await _wake_layout(server, opts, one_process)
    return figures


async def _wake_layout(server: Server, opts: Options, one_process: bool) -> list[Figure]:
    n = opts.size.wake
    target = await server.fresh("wake-1p" if one_process else "wake")
    engine = target.engine()
    probe = probe_engine(target)
    fleet = _fleet(target, opts, one_process, "wake-")
    bare = await BareCommit(target).open()
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await asyncio.to_thread(fleet.start)
            fleet.release()
            first, after, step = await wake_samples(client, probe, n, warm=True)
            commits = await bare.timed(max(100, n))
            spaced = await bare.timed(max(50, n // 2), WAKE_SPACING)
    finally:
        await bare.close()
        await asyncio.to_thread(fleet.shutdown)
        await probe.dispose()
        await engine.dispose()
    suffix = ONE_PROCESS if one_process else ""
    settings = {"samples": n, "layout": fleet.layout, "spacing_ms": WAKE_SPACING * 1000}
    figures = []
    for label, samples in (
        ("signal -> next task", after),
        ("start -> first task", first),
        ("task -> next task", step),
    ):
        for p in (50, 95, 99):
            figures.append(
                Figure("wake", f"{label} p{p}{suffix}", percentile(samples, p), "ms", settings)
            )
    floor = percentile(commits, 50)
    spaced_floor = percentile(spaced, 50)
    if not one_process:
        figures += bare_figures("wake", commits)
    else:  # the denominators of this layout's ratios, measured beside it
        figures.append(
            Figure(
                "wake", f"bare INSERT commit p50{suffix}", floor, "ms", {"commits": len(commits)}
            )
        )
    figures.append(
        Figure(
            "wake",
            f"{SPACED_BARE}{suffix}",
            spaced_floor,
            "ms",
            {"commits": len(spaced), "spacing_ms": WAKE_SPACING * 1000},
        )
    )
    for label, samples in (("signal -> next task", after), ("start -> first task", first)):
        p50 = percentile(samples, 50)
        figures.append(multiple("wake", f"{label} p50 / bare commit p50{suffix}", p50, floor))
        figures.append(
            multiple("wake", f"{label} p50 / spaced bare commit p50{suffix}", p50, spaced_floor)
        )
    return figures


SPACED_BARE = "bare INSERT commit p50, spaced as the samples"


WAKE_SPACING = 0.02  # between one start (or signal) and the next


class WakeSamples(NamedTuple):
    """The ms of each wake run: ``Client.start`` to the first task's start, ``Client.signal``
    to the next task's start, and that task's end to the start of the one after it."""

    first: list[float]
    after: list[float]
    step: list[float]


async def wake_samples(
    client: Client, probe: AsyncEngine, n: int, *, warm: bool = False
) -> WakeSamples:
    """Start ``n`` wake runs one at a time, then signal each once all wait."""
    if warm:
        handle = await client.start(wake, -1)
        await _wait_until(lambda: _waiting(probe, [handle.run_id]), 30, "the warm-up run")
        await client.signal(handle.run_id, "go", Go(n=-1))
        await handle.result(timeout=30)
    started: dict[uuid.UUID, float] = {}
    for i in range(n):
        at = time.time()
        handle = await client.start(wake, i)
        started[handle.run_id] = at
        await asyncio.sleep(WAKE_SPACING)
    runs = list(started)
    await _wait_until(lambda: _waiting(probe, runs), 60, "the runs to wait for 'go'")
    signalled: dict[uuid.UUID, float] = {}
    for i, run_id in enumerate(runs):
        signalled[run_id] = time.time()
        await client.signal(run_id, "go", Go(n=i))
        await asyncio.sleep(WAKE_SPACING)
    await _wait_until(lambda: _finished(probe, runs), 60, "the runs to finish")
    stamps = await _stamps(probe, runs)
    first = [(stamps[(r, "stamp")] - at) * 1000 for r, at in started.items()]
    after = [(stamps[(r, "stamp_go")] - at) * 1000 for r, at in signalled.items()]
    step = [(stamps[(r, "stamp_next")] - stamps[(r, "stamp_go")]) * 1000 for r in runs]
    return WakeSamples(first, after, step)


async def scenario_latency(server: Server, opts: Options) -> list[Figure]:
    """Wake and start-to-first-task p50/p95/p99 at rest, then under a background load of
    half the e2e-1 capacity this fleet measured just before (one-task runs started in
    small batches every 20 ms by a second client); on 1 worker + 1 decider process, then
    on one process with every role."""
    figures: list[Figure] = []
    for one_process in (False, True):
        figures += await _latency_layout(server, opts, one_process)
    return figures


async def _latency_layout(server: Server, opts: Options, one_process: bool) -> list[Figure]:
    n = opts.size.wake
    suffix = ONE_PROCESS if one_process else ""
    target = await server.fresh("latency-1p" if one_process else "latency")
    engine = target.engine()
    loader_engine = target.engine()
    probe = probe_engine(target)
    fleet = _fleet(target, opts, one_process, "latency-")
    bare = await BareCommit(target).open()
    try:
        async with Client(engine, app=app) as client, Client(loader_engine, app=app) as loader:
            await client.deploy()
            await asyncio.to_thread(fleet.start)
            fleet.release()
            capacity = await _capacity(loader, probe, opts.size.e2e_1)
            rest = await wake_samples(client, probe, n, warm=True)
            rate = capacity / 2
            stop = asyncio.Event()
            background = asyncio.create_task(_load(loader, rate, stop))
            try:
                loaded = await wake_samples(client, probe, n)
            finally:
                stop.set()
                achieved = await background
            commits = await bare.timed(max(100, n))
    finally:
        await bare.close()
        await asyncio.to_thread(fleet.shutdown)
        await probe.dispose()
        await loader_engine.dispose()
        await engine.dispose()
    floor = percentile(commits, 50)
    figures = [
        Figure(
            "latency",
            f"e2e-1 capacity of this fleet{suffix}",
            capacity,
            "wf/s",
            {"layout": fleet.layout},
        ),
        Figure("latency", f"background load{suffix}", achieved, "wf/s", {"target": round(rate)}),
        *([] if one_process else bare_figures("latency", commits)),
    ]
    for load, (first, after, _) in (("at rest", rest), ("at 50% load", loaded)):
        for label, samples in (("signal -> next task", after), ("start -> first task", first)):
            settings = {
                "samples": n,
                "p50 / bare commit p50": round(percentile(samples, 50) / floor, 1),
            }
            for p in (50, 95, 99):
                name = f"{label} {load} p{p}{suffix}"
                figures.append(Figure("latency", name, percentile(samples, p), "ms", settings))
    return figures


async def _capacity(client: Client, probe: AsyncEngine, n: int) -> float:
    """One-task runs per second this fleet drains from a backlog of ``n``."""
    t0 = time.perf_counter()
    for offset in range(0, n, BATCH):
        await client.start_many(one, list(range(offset, min(n, offset + BATCH))))
    await _wait_until(lambda: _none_running(probe), max(60.0, n / 20), "the capacity drain")
    return n / (time.perf_counter() - t0)


async def _load(client: Client, rate: float, stop: asyncio.Event) -> float:
    """Start one-task runs at ``rate``/s until ``stop``; the rate achieved."""
    tick = 0.02
    started = 0
    t0 = time.perf_counter()
    while not stop.is_set():
        due = int(rate * (time.perf_counter() - t0)) - started
        if due > 0:
            await client.start_many(one, list(range(started, started + due)))
            started += due
        await asyncio.sleep(tick)
    return started / (time.perf_counter() - t0)


async def _waiting(probe: AsyncEngine, runs: list[uuid.UUID]) -> bool:
    async with probe.connect() as conn:
        result = await conn.execute(
            select(func.count())
            .select_from(Tasks.table)
            .where(
                Tasks.run_id.in_(runs),
                Tasks.node_id == "go",
                Tasks.state == TaskState.WAITING,
            )
        )
        return int(result.scalar_one()) >= len(runs)


async def _none_running(engine: AsyncEngine) -> bool:
    return await _running(engine) == 0


async def _finished(probe: AsyncEngine, runs: list[uuid.UUID]) -> bool:
    async with probe.connect() as conn:
        result = await conn.execute(
            select(func.count())
            .select_from(Runs.table)
            .where(Runs.id.in_(runs), Runs.status == RunStatus.RUNNING)
        )
        return int(result.scalar_one()) == 0


async def _stamps(probe: AsyncEngine, runs: list[uuid.UUID]) -> dict[tuple[uuid.UUID, str], float]:
    async with probe.connect() as conn:
        result = await conn.execute(
            select(Tasks.run_id, Tasks.node_id, Tasks.output).where(
                Tasks.run_id.in_(runs),
                Tasks.node_id.in_(["stamp", "stamp_go", "stamp_next"]),
                Tasks.state == TaskState.COMPLETED,
            )
        )
        return {
            (run_id, node): float(out)
            for run_id, node, out in result
            if isinstance(out, int | float)
        }


# -- history ---------------------------------------------------------------------------------


class CycleKey:
    """The one shard key a ``Cycler``'s loops hold: the key of the run being cycled.

    A tick takes per key (the decider every dirty held key, the worker one dirty key and
    queue), so loops holding every key would spend a cycle's tick on the other keys'
    empty takes, and the worker's one claim of a tick would mostly miss the run's key.
    Holding only that key makes each step the single-key path a run takes."""

    def __init__(self) -> None:
        self.key = 0

    def held(self) -> Sequence[int]:
        return (self.key,)


class Cycler:
    """One database's start -> decide -> claim -> finish -> decide cycle, in-process,
    each step timed; its decider and worker are made once, so rounds can alternate
    between databases (interleaving cancels the machine's drift out of the ratios).
    Both hold only the cycled run's key (``CycleKey``)."""

    def __init__(
        self, engine: AsyncEngine, client: Client, shards: Shards, worker_app: App = app
    ) -> None:
        self.client = client
        self.shards = shards
        self.key = CycleKey()
        self.decider = DeciderLoop(engine, shards=shards, held=self.key)
        self.worker = Worker(
            engine,
            worker_app,
            shards=shards,
            held=self.key,
            queues=("default",),
            concurrency=4,
            flush_interval=0,
        )
        self.claims: list[float] = []
        self.decides: list[float] = []
        self._i = 0

    async def run(self, cycles: int, *, keep: bool = True) -> None:
        for _ in range(cycles):
            self._i += 1
            handle = await self.client.start(one, self._i)
            key = self.key.key = self.shards.of_run(handle.run_id)
            # What a running loop's NOTIFY would mark: the run's key has work (a tick
            # between polls takes from marked keys only).
            self.decider.decide_now([key])
            t0 = time.perf_counter()
            await self.decider.tick()
            t1 = time.perf_counter()
            done = self.worker.completed
            self.worker.claim_soon(key)
            await self.worker.tick()
            t2 = time.perf_counter()
            while self.worker.completed == done:  # noqa: ASYNC110 - the worker exposes a counter
                await asyncio.sleep(0.0005)
            t3 = time.perf_counter()
            self.decider.decide_now([key])
            await self.decider.tick()
            t4 = time.perf_counter()
            if keep:
                self.decides += [(t1 - t0) * 1000, (t4 - t3) * 1000]
                self.claims.append((t2 - t1) * 1000)

    async def close(self) -> None:
        self.worker.stop()
        await self.worker.on_stop()


async def interleaved(cyclers: list[Cycler], samples: int, round_size: int = 10) -> None:
    """Warm every cycler, then ``samples`` timed cycles each, in alternating rounds."""
    for cycler in cyclers:
        await cycler.run(10, keep=False)
    for done in range(0, samples, round_size):
        for cycler in cyclers:
            await cycler.run(min(round_size, samples - done))


async def scenario_history(server: Server, opts: Options) -> list[Figure]:
    """Claim and decide p50 on an empty database and on one holding ``history_runs``
    finished runs, in alternating rounds of 10 cycles (same moments of the machine)."""
    n, samples = opts.size.history_runs, opts.size.history_samples
    empty_target = await server.fresh("history-empty")
    full_target = await server.fresh("history")
    empty_engine = empty_target.engine()
    full_engine = full_target.engine()
    cyclers: list[Cycler] = []
    try:
        async with Client(empty_engine, app=app) as empty, Client(full_engine, app=app) as full:
            await empty.deploy()
            await full.deploy()
            seconds = await generate_history(full_engine, n)
            cyclers = [
                Cycler(empty_engine, empty, await empty.shards()),
                Cycler(full_engine, full, await full.shards()),
            ]
            await interleaved(cyclers, samples)
    finally:
        for cycler in cyclers:
            await cycler.close()
        await full_engine.dispose()
        await empty_engine.dispose()
    settings = {
        "samples": samples,
        "order": "interleaved rounds of 10",
        "history runs": n,
        "generated in s": round(seconds, 1),
    }
    figures = []
    e, f = cyclers
    for name, empty_samples, full_samples in (
        ("claim", e.claims, f.claims),
        ("decide", e.decides, f.decides),
    ):
        e50, f50 = percentile(empty_samples, 50), percentile(full_samples, 50)
        figures.append(Figure("history", f"{name} p50, empty DB", e50, "ms", settings))
        figures.append(Figure("history", f"{name} p50, {n:,} runs", f50, "ms", settings))
        figures.append(Figure("history", f"{name} ratio history/empty", f50 / e50, "x", settings))
    return figures


async def scenario_claims(server: Server, opts: Options) -> list[Figure]:
    """The claim's cost without limits (the one-statement claim) and with a queue limit
    that never binds here (the limited claim's transaction): p50 of a worker's claim,
    the two measured in alternating rounds."""
    samples = opts.size.history_samples
    limited = App(list(app.workflows.values()), queue_limits={"default": 64})
    engines: list[AsyncEngine] = []
    cyclers: list[Cycler] = []
    try:
        for label, worker_app in (("plain", app), ("limited", limited)):
            target = await server.fresh(f"claims-{label}")
            engine = target.engine()
            engines.append(engine)
            client = Client(engine, app=app)
            await client.deploy()
            cyclers.append(Cycler(engine, client, await client.shards(), worker_app))
        await interleaved(cyclers, samples)
    finally:
        for cycler in cyclers:
            await cycler.close()
        for engine in engines:
            await engine.dispose()
    settings = {"samples": samples, "order": "interleaved rounds of 10"}
    return [
        Figure("claims", name, percentile(c.claims, 50), "ms", settings)
        for name, c in zip(("claim p50, no limit", "claim p50, queue limit"), cyclers, strict=True)
    ]


SCENARIOS: dict[str, Callable[[Server, Options], Awaitable[list[Figure]]]] = {
    "start": scenario_start,
    "e2e-1": scenario_e2e_1,
    "e2e-3": scenario_e2e_3,
    "wake": scenario_wake,
    "history": scenario_history,
    "claims": scenario_claims,
    "commits": scenario_commits,
    "latency": scenario_latency,
    "metrics": scenario_metrics,
}


def default_cores() -> int:
    return os.cpu_count() or 1
