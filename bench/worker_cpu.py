"""CPU per one-task workflow of the worker and the decider processes while they drain a
backlog (1 worker + 1 decider process), from the kernel's accounting of each process
(``/proc/<pid>/stat``: user + system time), so it counts what the process spent however
it spent it — the figure the observability-off and per-attempt savings move."""

from __future__ import annotations

import asyncio
import os
import time

from bench.flows import app, one
from bench.harness import Figure, Server, probe_engine
from bench.procs import Fleet
from bench.scenarios import BATCH, Options, _none_running, _wait_until
from legato import Client


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def scenario_worker_cpu(server: Server, opts: Options) -> list[Figure]:
    n = max(opts.size.e2e_1, 4 * BATCH)
    target = await server.fresh("worker-cpu")
    engine = target.engine()
    probe = probe_engine(target)
    fleet = Fleet(target, workers=1, deciders=1, concurrency=opts.concurrency)
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            for offset in range(0, n, BATCH):
                await client.start_many(one, list(range(offset, min(n, offset + BATCH))))
            await asyncio.to_thread(fleet.start)
            pids = dict(zip(fleet.names, (proc.pid for proc in fleet.procs), strict=True))
            before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            t0 = time.perf_counter()
            fleet.release()
            await _wait_until(lambda: _none_running(probe), max(60.0, n / 20), "the drain")
            seconds = time.perf_counter() - t0
            after = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    finally:
        await asyncio.to_thread(fleet.shutdown)
        await probe.dispose()
        await engine.dispose()
    settings = {"runs": n, "layout": fleet.layout}
    return [
        Figure("cpu", "drain, 1 worker + 1 decider", n / seconds, "wf/s", settings),
        *(
            Figure(
                "cpu",
                f"{name.split('-')[0]} CPU per wf",
                (after[name] - before[name]) * 1000 / n,
                "ms",
                {"clock tick ms": round(1000 / os.sysconf("SC_CLK_TCK"), 1)},
            )
            for name in pids
        ),
    ]
