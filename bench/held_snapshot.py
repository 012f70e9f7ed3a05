"""The drain rate while another session holds a snapshot (the xmin horizon).

SKIP LOCKED queues slow down while a long transaction holds back the horizon: the
rows the queue deletes cannot be vacuumed, and every take walks past them. One fleet
(1 worker + 1 decider process) drains batches of one-task runs under a steady load:
first free, then while a REPEATABLE READ transaction that has read a row stays open
for ``held_seconds`` (``legato bench --held-seconds``; 600 for the ten-minute figure),
then after it is released. Each phase's rate is a ratio to the free rate; the held
phase reports its last window (the horizon has been held longest then) and its worst.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.flows import app, one
from bench.harness import Figure, Server, probe_engine
from bench.procs import Fleet
from bench.scenarios import Options, _wait_until
from legato import Client, RunStatus
from legato.schema import Runs

#: How many times longer than the free phase the snapshot is held without --held-seconds.
HELD_PHASES = 3


async def _drained(client: Client, probe: AsyncEngine, batch: int) -> float:
    """Start ``batch`` runs and wait until none of them is running; runs per second."""
    t0 = time.perf_counter()
    started: list[uuid.UUID] = []
    for offset in range(0, batch, 500):
        handles = await client.start_many(one, list(range(offset, min(batch, offset + 500))))
        started += [handle.run_id for handle in handles]
    first = min(started)
    await _wait_until(lambda: _none_running_since(probe, first), max(60.0, batch / 20), "the drain")
    return batch / (time.perf_counter() - t0)


async def _none_running_since(probe: AsyncEngine, first: uuid.UUID) -> bool:
    """Whether no run from ``first`` on (ids are time-ordered) is RUNNING. Read from
    ``ix_runs_active`` from ``first`` on (its predicate spelt out, not a parameter, so a
    generic plan can use the partial index): a count of every running run would walk
    the index entries of every earlier batch's runs that the held snapshot keeps,
    putting on the server a load the engine does not (9 ms a poll after two minutes)."""
    async with probe.connect() as conn:
        result = await conn.execute(
            select(func.count())
            .select_from(Runs.table)
            .where(Runs.id >= first, text(f"status = '{RunStatus.RUNNING.value}'"))
        )
        return int(result.scalar_one()) == 0


async def _phase(client: Client, probe: AsyncEngine, batch: int, seconds: float) -> list[float]:
    """Drain batch after batch for at least ``seconds``; each batch's rate."""
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while not rates or time.perf_counter() < deadline:
        rates.append(await _drained(client, probe, batch))
    return rates


async def scenario_held_snapshot(server: Server, opts: Options) -> list[Figure]:
    """Free, held and released drain rates (module docstring): batches the size of
    e2e-1's backlog, free and released phases of a few seconds each."""
    batch = opts.size.e2e_1
    phase = 2 * opts.size.low_load_seconds
    held_for = HELD_PHASES * phase if opts.held_seconds is None else opts.held_seconds
    concurrency = opts.concurrency
    target = await server.fresh("held")
    engine = target.engine()
    probe = probe_engine(target)
    fleet = Fleet(target, workers=1, deciders=1, concurrency=concurrency)
    holder = await asyncpg.connect(target.direct_url)
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            await asyncio.to_thread(fleet.start)
            fleet.release()
            await _drained(client, probe, batch)  # warm
            free = await _phase(client, probe, batch, phase)
            transaction = holder.transaction(isolation="repeatable_read")
            await transaction.start()
            await holder.fetchval(f'SELECT count(*) FROM "{target.schema}".installation')
            held = await _phase(client, probe, batch, held_for)
            await transaction.rollback()
            released = await _phase(client, probe, batch, phase)
    finally:
        await holder.close()
        await asyncio.to_thread(fleet.shutdown)
        await probe.dispose()
        await engine.dispose()
    free_rate = sum(free) / len(free)
    settings = {"batch": batch, "layout": fleet.layout}
    held_settings = {"held_s": held_for, "batches": len(held)}
    return [
        Figure("held", "drain, free", free_rate, "wf/s", {**settings, "batches": len(free)}),
        Figure(
            "held",
            "drain, snapshot held: last batch / free",
            held[-1] / free_rate,
            "x",
            held_settings,
        ),
        Figure(
            "held",
            "drain, snapshot held: worst batch / free",
            min(held) / free_rate,
            "x",
            held_settings,
        ),
        Figure(
            "held",
            "drain, released / free",
            sum(released) / len(released) / free_rate,
            "x",
            {"batches": len(released)},
        ),
    ]
