"""Legato's scenarios: start, e2e-1, e2e-3, wake, history, commits per workflow."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.flows import Go, app, chain3, fanout10, one, one_tx, wake
from bench.harness import Figure, Server, percentile
from bench.procs import Fleet
from legato import App, Client, Workflow
from legato.db import create_engine
from legato.engine.decider_loop import DeciderLoop
from legato.engine.worker import Worker
from legato.schema import Runs, RunStatus, Tasks, TaskState

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


SIZES = {
    "tiny": Sizes(20, 200, 20, 10, 4, 5, 500, 5),
    "small": Sizes(300, 3_000, 500, 200, 40, 50, 20_000, 50),
    "full": Sizes(1_000, 30_000, 5_000, 1_000, 100, 200, 1_000_000, 200),
}


@dataclass
class Options:
    size: Sizes
    cores: int
    profile_dir: Path | None = None
    concurrency: int = 64


@dataclass(frozen=True)
class Counters:
    commits: int
    rollbacks: int
    xid: int


async def counters(engine: AsyncEngine) -> Counters:
    """This database's committed/rolled-back transactions and the cluster's next xid."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = (
            await conn.execute(
                text(
                    "SELECT xact_commit, xact_rollback, "
                    "pg_snapshot_xmax(pg_current_snapshot())::text::bigint "
                    "FROM pg_stat_database WHERE datname = current_database()"
                )
            )
        ).one()
    return Counters(int(row[0]), int(row[1]), int(row[2]))


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


# -- start -----------------------------------------------------------------------------------


async def scenario_start(server: Server, opts: Options) -> list[Figure]:
    target = await server.fresh("start")
    engine = create_engine(target.url, target.schema)
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await client.start(one, 0)  # warm: version cache, pool, statement cache
            n = opts.size.start_one
            t0 = time.perf_counter()
            for i in range(n):
                await client.start(one, i)
            sequential = n / (time.perf_counter() - t0)
            m = opts.size.start_batched
            t0 = time.perf_counter()
            for offset in range(0, m, BATCH):
                await client.start_many(one, list(range(offset, min(m, offset + BATCH))))
            batched = m / (time.perf_counter() - t0)
    finally:
        await engine.dispose()
    return [
        Figure("start", "one at a time", sequential, "runs/s", {"runs": n, "client": 1}),
        Figure("start", "batched (start_many)", batched, "runs/s", {"runs": m, "batch": BATCH}),
    ]


# -- end to end ------------------------------------------------------------------------------


@dataclass
class Drained:
    rate: float
    seconds: float
    layout: str
    commits_per_wf: float
    rollbacks_per_wf: float
    xids_per_wf: float
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
) -> Drained:
    """Start ``n`` runs, then release the processes and time until all have finished."""
    target = await server.fresh(label)
    engine = create_engine(target.url, target.schema)
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            for offset in range(0, n, BATCH):
                await client.start_many(workflow, list(range(offset, min(n, offset + BATCH))))
        fleet = Fleet(
            target.url,
            target.schema,
            workers=workers,
            deciders=deciders,
            concurrency=opts.concurrency,
            profile_dir=opts.profile_dir,
            profile_label=f"{label}-",
        )
        await asyncio.to_thread(fleet.start)
        try:
            before = await counters(engine)
            t0 = time.perf_counter()
            fleet.release()
            deadline = t0 + max(120.0, n / 20)
            while await _running(engine) > 0:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{label}: runs still running after {deadline - t0:.0f}s")
                await asyncio.sleep(0.02)
            seconds = time.perf_counter() - t0
        finally:
            await asyncio.to_thread(fleet.shutdown)
        after = await counters(engine)  # the processes have exited: their stats are flushed
        statuses = await _statuses(engine)
    finally:
        await engine.dispose()
    return Drained(
        rate=n / seconds,
        seconds=seconds,
        layout=fleet.layout,
        commits_per_wf=(after.commits - before.commits) / n,
        rollbacks_per_wf=(after.rollbacks - before.rollbacks) / n,
        xids_per_wf=(after.xid - before.xid) / n,
        statuses=statuses,
    )


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
    figures.append(commit_figure(saturated, n))
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


def commit_figure(d: Drained, n: int) -> Figure:
    return Figure(
        "commits",
        "commits per one-task workflow",
        d.commits_per_wf,
        "xact",
        {
            "runs": n,
            "layout": d.layout,
            "write xids per wf (incl. savepoints)": round(d.xids_per_wf, 2),
            "rollbacks per wf": round(d.rollbacks_per_wf, 2),
        },
    )


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
    """Start-to-first-task and signal-to-next-task latency, measured one run at a time."""
    n = opts.size.wake
    target = await server.fresh("wake")
    engine = create_engine(target.url, target.schema)
    fleet = Fleet(
        target.url,
        target.schema,
        workers=1,
        deciders=1,
        concurrency=opts.concurrency,
        profile_dir=opts.profile_dir,
        profile_label="wake-",
    )
    spacing = 0.02
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await asyncio.to_thread(fleet.start)
            fleet.release()
            started: dict[uuid.UUID, float] = {}
            warm = await client.start(wake, -1)
            await _wait_until(lambda: _waiting(engine, 1), 30, "the warm-up run")
            await client.signal(warm.run_id, "go", Go(n=-1))
            await warm.result(timeout=30)
            for i in range(n):
                at = time.time()
                handle = await client.start(wake, i)
                started[handle.run_id] = at
                await asyncio.sleep(spacing)
            await _wait_until(lambda: _waiting(engine, n), 60, "the runs to wait for 'go'")
            signalled: dict[uuid.UUID, float] = {}
            for i, run_id in enumerate(started):
                signalled[run_id] = time.time()
                await client.signal(run_id, "go", Go(n=i))
                await asyncio.sleep(spacing)
            await _wait_until(lambda: _none_running(engine), 60, "the runs to finish")
            stamps = await _stamps(engine)
    finally:
        await asyncio.to_thread(fleet.shutdown)
        await engine.dispose()
    first = [(stamps[(r, "stamp")] - at) * 1000 for r, at in started.items()]
    after = [(stamps[(r, "stamp_go")] - at) * 1000 for r, at in signalled.items()]
    settings = {"samples": n, "layout": fleet.layout, "spacing_ms": spacing * 1000}
    figures = []
    for label, samples in (("signal -> next task", after), ("start -> first task", first)):
        for p in (50, 95, 99):
            figures.append(Figure("wake", f"{label} p{p}", percentile(samples, p), "ms", settings))
    return figures


async def _waiting(engine: AsyncEngine, n: int) -> bool:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(func.count())
            .select_from(Tasks.table)
            .where(Tasks.node_id == "go", Tasks.state == TaskState.WAITING)
        )
        return int(result.scalar_one()) >= n


async def _none_running(engine: AsyncEngine) -> bool:
    return await _running(engine) == 0


async def _stamps(engine: AsyncEngine) -> dict[tuple[uuid.UUID, str], float]:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(Tasks.run_id, Tasks.node_id, Tasks.output).where(
                Tasks.node_id.in_(["stamp", "stamp_go"]), Tasks.state == TaskState.COMPLETED
            )
        )
        return {
            (run_id, node): float(out)
            for run_id, node, out in result
            if isinstance(out, int | float)
        }


# -- history ---------------------------------------------------------------------------------


async def _cycles(
    engine: AsyncEngine, client: Client, samples: int, worker_app: App = app
) -> tuple[list[float], ...]:
    """Start a run, decide it, claim its task, let it finish, decide again; time each step."""
    decider = DeciderLoop(engine)
    worker = Worker(engine, worker_app, queues=("default",), concurrency=4, flush_interval=0)
    claims: list[float] = []
    decides: list[float] = []
    try:
        for i in range(samples + 10):  # the first 10 warm up
            await client.start(one, i)
            t0 = time.perf_counter()
            await decider.tick()
            t1 = time.perf_counter()
            done = worker.completed
            await worker.tick()
            t2 = time.perf_counter()
            while worker.completed == done:  # noqa: ASYNC110 - the worker exposes a counter
                await asyncio.sleep(0.0005)
            t3 = time.perf_counter()
            await decider.tick()
            t4 = time.perf_counter()
            if i >= 10:
                decides += [(t1 - t0) * 1000, (t4 - t3) * 1000]
                claims.append((t2 - t1) * 1000)
    finally:
        worker.stop()
        await worker.on_stop()
    return claims, decides


async def generate_history(engine: AsyncEngine, n: int) -> float:
    """Insert ``n`` finished one-task runs, their tasks and 3 events each, set-based, into
    the current month's partition; then VACUUM ANALYZE. Returns the seconds it took."""
    t0 = time.perf_counter()
    schema = engine.get_execution_options()["schema_translate_map"]["legato"]
    async with engine.connect() as conn:
        version = int(
            (
                await conn.execute(
                    text(f"SELECT max(version) FROM {schema}.workflow_definitions WHERE name = :n"),
                    {"n": one.name},
                )
            ).scalar_one()
        )
        pg18 = int((await conn.exec_driver_sql("SHOW server_version_num")).scalar_one()) >= 180000
        newest = (
            await conn.execute(text(f"SELECT id FROM {schema}.runs ORDER BY id DESC LIMIT 1"))
        ).scalar()
    new_id = (
        "uuidv7()"
        if pg18
        else "(lpad(to_hex((extract(epoch from clock_timestamp())*1000)::bigint), 12, '0') "
        "|| '7' || substr(md5(random()::text), 1, 3) || to_hex(8 + floor(random()*4)::int) "
        "|| substr(md5(random()::text), 1, 15))::uuid"
    )
    s = schema
    runs_sql = f"""
        INSERT INTO {s}.runs (id, workflow_name, workflow_version, status, input, output,
                              created_at, updated_at, finished_at)
        SELECT {new_id}, '{one.name}', {version}, 'SUCCEEDED', to_jsonb(g), to_jsonb(g),
               now(), now(), now()
        FROM generate_series(1, {n}) AS g"""
    history = f"r.workflow_name = '{one.name}' AND r.status = 'SUCCEEDED'"
    if newest is not None:  # only the generated runs, not the ones the engine ran before
        history += f" AND r.id > '{newest}'"
    tasks_sql = f"""
        INSERT INTO {s}.tasks (run_id, id, node_id, iteration, attempt, kind, state, task_name,
                               queue, input, output, observed, created_at, started_at,
                               finished_at)
        SELECT r.id, {new_id}, 'noop', 0, 1, 'TASK', 'COMPLETED', 'noop', 'default', r.input,
               r.output, true, now(), now(), now()
        FROM {s}.runs r WHERE {history}"""
    events_sql = f"""
        INSERT INTO {s}.run_events (run_id, seq, type, node_id, data, created_at)
        SELECT r.id, e.seq, e.type, e.node_id, e.data, now()
        FROM {s}.runs r CROSS JOIN (VALUES
            (1, 'run_started', NULL, NULL::jsonb),
            (2, 'task_completed', 'noop', '{{"output": 1}}'::jsonb),
            (3, 'run_succeeded', NULL, '1'::jsonb)) AS e(seq, type, node_id, data)
        WHERE {history}"""

    async def run(statement: str) -> None:
        async with engine.begin() as conn:
            await conn.exec_driver_sql("SET LOCAL synchronous_commit = off")  # generation only
            try:
                async with conn.begin_nested():
                    # Skips the per-row NOTIFY trigger and FK checks (superuser only).
                    await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            except Exception:
                await conn.exec_driver_sql(
                    f"ALTER TABLE {s}.run_events DISABLE TRIGGER run_events_notify_v1"
                )
            await conn.exec_driver_sql(statement)

    await run(runs_sql)
    await asyncio.gather(run(tasks_sql), run(events_sql))
    async with engine.connect() as conn:
        await conn.exec_driver_sql(
            f"ALTER TABLE {s}.run_events ENABLE TRIGGER run_events_notify_v1"
        )
        await conn.commit()
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as conn:
        for table in ("runs", "tasks", "run_events"):
            await conn.exec_driver_sql(f"VACUUM (ANALYZE) {s}.{table}")
    return time.perf_counter() - t0


async def scenario_history(server: Server, opts: Options) -> list[Figure]:
    n, samples = opts.size.history_runs, opts.size.history_samples
    target = await server.fresh("history")
    engine = create_engine(target.url, target.schema)
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            empty_claims, empty_decides = await _cycles(engine, client, samples)
            seconds = await generate_history(engine, n)
            full_claims, full_decides = await _cycles(engine, client, samples)
    finally:
        await engine.dispose()
    settings = {"samples": samples, "history runs": n, "generated in s": round(seconds, 1)}
    figures = []
    for name, empty, full in (
        ("claim", empty_claims, full_claims),
        ("decide", empty_decides, full_decides),
    ):
        e50, f50 = percentile(empty, 50), percentile(full, 50)
        figures.append(Figure("history", f"{name} p50, empty DB", e50, "ms", settings))
        figures.append(Figure("history", f"{name} p50, {n:,} runs", f50, "ms", settings))
        figures.append(Figure("history", f"{name} ratio history/empty", f50 / e50, "x", settings))
    return figures


async def scenario_claims(server: Server, opts: Options) -> list[Figure]:
    """The claim's cost without limits (the one-statement claim) and with a queue limit
    that never binds here (the limited claim's transaction): p50 of a worker's claim."""
    samples = opts.size.history_samples
    limited = App(list(app.workflows.values()), queue_limits={"default": 64})
    figures: list[Figure] = []
    for name, worker_app in (("claim p50, no limit", app), ("claim p50, queue limit", limited)):
        target = await server.fresh(f"claims-{len(figures)}")
        engine = create_engine(target.url, target.schema)
        try:
            async with Client(engine, app=app) as client:
                await client.deploy()
                claims, _ = await _cycles(engine, client, samples, worker_app)
        finally:
            await engine.dispose()
        figures.append(Figure("claims", name, percentile(claims, 50), "ms", {"samples": samples}))
    return figures


SCENARIOS: dict[str, Callable[[Server, Options], Awaitable[list[Figure]]]] = {
    "start": scenario_start,
    "e2e-1": scenario_e2e_1,
    "e2e-3": scenario_e2e_3,
    "wake": scenario_wake,
    "history": scenario_history,
    "claims": scenario_claims,
}


def default_cores() -> int:
    return os.cpu_count() or 1
