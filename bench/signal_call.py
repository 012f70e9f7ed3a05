"""``Client.signal``'s own cost: how long the call takes to return, one at a time, beside
bare one-row commits measured in blocks between its blocks.

The runs wait for ``go`` with no decider running (the fleet that brought them there is
stopped first), as a run waiting on an API call does between its steps, so each call is
the client's statement alone: the run's check, the signal's insert, the decide row.
"""

from __future__ import annotations

import asyncio
import time

from bench.flows import Go, app, wake
from bench.harness import Figure, Server, percentile, probe_engine
from bench.scenarios import BareCommit, Options, _fleet, _rate, _wait_until, _waiting, multiple
from legato import Client

BLOCKS = 10


async def scenario_signal(server: Server, opts: Options) -> list[Figure]:
    n = max(BLOCKS, opts.size.start_one)
    target = await server.fresh("signal")
    engine = target.engine()
    probe = probe_engine(target)
    fleet = _fleet(target, opts, True, "signal-")
    bare = await BareCommit(target).open()
    try:
        async with Client(engine, app=app) as client:
            await client.deploy()
            handles = [await client.start(wake, i) for i in range(n + 20)]
            runs = [h.run_id for h in handles]
            await asyncio.to_thread(fleet.start)
            fleet.release()
            await _wait_until(lambda: _waiting(probe, runs), 120, "the runs to wait for 'go'")
            await asyncio.to_thread(fleet.shutdown)
            for run_id in runs[:20]:  # warm: the statement cache, the pool
                await client.signal(run_id, "go", Go(n=0))
            calls: list[float] = []
            commits: list[float] = []
            per_block = n // BLOCKS
            for block in range(BLOCKS):
                for run_id in runs[20 + block * per_block : 20 + (block + 1) * per_block]:
                    t0 = time.perf_counter()
                    await client.signal(run_id, "go", Go(n=1))
                    calls.append((time.perf_counter() - t0) * 1000)
                commits += await bare.timed(per_block)
    finally:
        await bare.close()
        await probe.dispose()
        await engine.dispose()
    settings = {"signals": len(calls), "client": 1}
    floor = percentile(commits, 50)
    return [
        Figure("signal", "Client.signal p50", percentile(calls, 50), "ms", settings),
        Figure("signal", "Client.signal p99", percentile(calls, 99), "ms", settings),
        Figure("signal", "Client.signal, one at a time", _rate(calls), "/s", settings),
        Figure("signal", "bare INSERT commit p50", floor, "ms", {"commits": len(commits)}),
        multiple("signal", "Client.signal rate / bare commit rate", _rate(calls), _rate(commits)),
        multiple("signal", "Client.signal p50 / bare commit p50", percentile(calls, 50), floor),
    ]
