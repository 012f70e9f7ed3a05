"""Starts from many clients at once, beside bare commits at the same concurrency.

A web application starts runs from many request handlers at once. For ``CLIENTS``
concurrent callers (in one process, and spread over ``PROCESSES`` processes) each
figure is a rate over the same wall-clock window: one-at-a-time ``Client.start`` calls,
bare one-row autocommit INSERTs, and bare INSERTs that also NOTIFY one channel in their
transaction (PostgreSQL serialises committing transactions that have notified, which
caps that floor), each as a ratio to the bare commits of the same concurrency.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from itertools import count

import asyncpg

from bench.flows import app, one
from bench.harness import Figure, Server, Target
from bench.procs import Fleet
from bench.scenarios import Options
from legato import Client
from legato.engine.repositories import notify

CLIENTS = 32
PROCESSES = 4


async def _for_window(callers: list[Callable[[int], Awaitable[None]]], seconds: float) -> int:
    """Run every caller in a loop until ``seconds`` pass; the calls completed."""
    done = 0
    deadline = time.perf_counter() + seconds
    numbers = count()

    async def loop(call: Callable[[int], Awaitable[None]]) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call(next(numbers))
            done += 1

    await asyncio.gather(*(loop(call) for call in callers))
    return done


async def _starts(
    target: Target, clients: int, seconds: float, heard: list[float] | None = None
) -> float:
    """One-at-a-time ``Client.start`` from ``clients`` concurrent callers of one Client
    (its pool one connection per caller); runs per second. With ``heard`` (a counter of
    decide NOTIFYs, in its one item), it ends holding the NOTIFYs per timed start."""
    engine = target.engine(pool_size=clients, max_overflow=0)
    try:
        async with Client(engine, app=app) as client:
            await _for_window([lambda i: _started(client, i)] * clients, 0.2)  # warm the pool
            before = heard[0] if heard else 0
            t0 = time.perf_counter()
            n = await _for_window([lambda i: _started(client, i)] * clients, seconds)
            rate = n / (time.perf_counter() - t0)
            if heard:
                await asyncio.sleep(0.2)  # the window's last notifications, still in flight
                heard[0] = (heard[0] - before) / n if n else 0
            return rate
    finally:
        await engine.dispose()


async def _starts_beside_a_decider(target: Target, clients: int, seconds: float) -> list[float]:
    """``_starts`` while a decider process decides the runs (as in production): the
    start rate and the decide NOTIFYs per start (one each before migration 0018; only
    the starts that find a decider asleep notify after it)."""
    listener = await asyncpg.connect(target.direct_url)
    heard = [0.0]

    def count(*_: object) -> None:
        heard[0] += 1

    await listener.add_listener(notify.decide_channel(target.schema), count)
    fleet = Fleet(target, workers=0, deciders=1)
    try:
        await asyncio.to_thread(fleet.start)
        fleet.release()
        rate = await _starts(target, clients, seconds, heard)
        return [rate, heard[0]]
    finally:
        await asyncio.to_thread(fleet.shutdown)
        await listener.close()


async def _started(client: Client, i: int) -> None:
    await client.start(one, i)


def _bare_sql(table: str, notify: bool) -> str:
    insert = f"INSERT INTO {table} (v) VALUES (1)"
    # One simple-protocol message: one implicit transaction, the NOTIFY in it.
    return f"{insert}; NOTIFY bench_bare" if notify else insert


async def _bare(target: Target, clients: int, seconds: float, notify: bool) -> float:
    """Bare one-row autocommit INSERTs from ``clients`` asyncpg connections; per second."""
    table = f'"{target.schema}".bench_bare_commit'
    conns = [await asyncpg.connect(target.direct_url) for _ in range(clients)]
    try:
        await conns[0].execute(
            f"CREATE TABLE IF NOT EXISTS {table} "
            "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int NOT NULL)"
        )
        sql = _bare_sql(table, notify)

        def caller(conn: asyncpg.Connection) -> Callable[[int], Awaitable[None]]:
            async def call(_: int) -> None:
                await conn.execute(sql)

            return call

        t0 = time.perf_counter()
        n = await _for_window([caller(conn) for conn in conns], seconds)
        return n / (time.perf_counter() - t0)
    finally:
        for conn in conns:
            await conn.close()


def _process_main(target: Target, what: str, clients: int, seconds: float, out: object) -> None:
    if what == "starts":
        rate = asyncio.run(_starts(target, clients, seconds))
    else:
        rate = asyncio.run(_bare(target, clients, seconds, notify=what == "bare+notify"))
    out.put(rate)  # type: ignore[attr-defined]


def _in_processes(target: Target, what: str, processes: int, clients: int, seconds: float) -> float:
    """``what`` from ``processes`` processes of ``clients`` callers each; summed rate."""
    ctx = multiprocessing.get_context("forkserver")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_process_main, args=(target, what, clients, seconds, out), daemon=True)
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    rates = [out.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    return float(sum(rates))


async def scenario_clients(server: Server, opts: Options) -> list[Figure]:
    """Starts and bare commits from ``CLIENTS`` concurrent callers, in one process and
    in ``PROCESSES`` processes, one after the other in windows as long as the low-load
    scenario's (0.5 s tiny, 3 s small, 5 s full)."""
    seconds = opts.size.low_load_seconds
    target = await server.fresh("clients")
    engine = target.engine()
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
    finally:
        await engine.dispose()
    per_process = CLIENTS // PROCESSES
    one = {
        "starts": await _starts(target, CLIENTS, seconds),
        "bare": await _bare(target, CLIENTS, seconds, notify=False),
        "bare+notify": await _bare(target, CLIENTS, seconds, notify=True),
        "bare, 1 client": await _bare(target, 1, seconds, notify=False),
        "starts, 1 client": await _starts(target, 1, seconds),
    }
    beside = await _starts_beside_a_decider(target, CLIENTS, seconds)
    spread = {
        what: await asyncio.to_thread(_in_processes, target, what, PROCESSES, per_process, seconds)
        for what in ("starts", "bare")
    }
    settings = {"clients": CLIENTS, "window_s": seconds}
    spread_settings = {"processes": PROCESSES, "clients each": per_process, "window_s": seconds}
    return [
        Figure("clients", f"starts, {CLIENTS} clients", one["starts"], "runs/s", settings),
        Figure("clients", f"bare commits, {CLIENTS} clients", one["bare"], "/s", settings),
        Figure(
            "clients",
            f"bare commits + NOTIFY, {CLIENTS} clients",
            one["bare+notify"],
            "/s",
            settings,
        ),
        Figure("clients", "starts, 1 client", one["starts, 1 client"], "runs/s", {}),
        Figure("clients", "bare commits, 1 client", one["bare, 1 client"], "/s", {}),
        _ratio(f"starts / bare commits, {CLIENTS} clients", one["starts"], one["bare"]),
        _ratio(f"bare + NOTIFY / bare commits, {CLIENTS} clients", one["bare+notify"], one["bare"]),
        _ratio("starts / bare commits, 1 client", one["starts, 1 client"], one["bare, 1 client"]),
        Figure(
            "clients",
            f"starts, {CLIENTS} clients, a decider running",
            beside[0],
            "runs/s",
            settings,
        ),
        _ratio(
            f"starts beside a decider / bare commits, {CLIENTS} clients", beside[0], one["bare"]
        ),
        Figure("clients", "decide NOTIFYs per start, a decider running", beside[1], "", settings),
        Figure(
            "clients",
            f"starts, {PROCESSES} processes x {per_process} clients",
            spread["starts"],
            "runs/s",
            spread_settings,
        ),
        Figure(
            "clients",
            f"bare commits, {PROCESSES} processes x {per_process} clients",
            spread["bare"],
            "/s",
            spread_settings,
        ),
        _ratio(
            f"starts / bare commits, {PROCESSES} processes x {per_process}",
            spread["starts"],
            spread["bare"],
        ),
    ]


def _ratio(name: str, value: float, floor: float) -> Figure:
    return Figure("clients", name, value / floor if floor else float("nan"), "x", {})
