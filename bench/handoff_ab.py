"""In-process A/B of the local hand-off: ``python -m bench.handoff_ab [--rounds N]``.

One ``Runtime`` with every role serves the wake workflow; rounds alternate between the
hand-off switched off (the decider and worker unlinked: the attempt goes decision commit
-> NOTIFY -> claim, the report waits for the decide queue's NOTIFY) and on, so machine
noise falls on both alike. Prints the medians of start -> first task and signal -> next
task per mode, the statements the runtime's engine ran per wake run (SQLAlchemy events),
and the real transactions (bench.txcount's statement log, the start included) per
one-task run started only once the previous one finished: deterministic counts, unlike
the times.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections import Counter
from functools import partial
from typing import Any

from sqlalchemy import event

from bench.flows import app, one, wake
from bench.harness import Server, probe_engine
from bench.scenarios import _finished, _wait_until, wake_samples
from legato import Client, Runtime
from legato.db import create_engine
from legato.engine.transport.handoff import LocalReports


def _link(runtime: Runtime, on: bool, reports: LocalReports | None) -> None:
    """Switch the hand-off built into ``runtime`` (whose worker's ``reports`` were
    ``reports``) on or off, between rounds."""
    assert runtime.worker is not None
    handoff = runtime.handoff if on else None
    runtime.worker.reports = reports if on else None
    for decider in runtime.decider_loops:
        decider.handoff = handoff


async def main(rounds: int, per_round: int) -> None:
    server = Server(None)
    await server.start()
    try:
        target = await server.fresh("handoff-ab")
        window = await server.statement_log(target)
        assert window is not None, "the embedded server's statement log is needed"
        engine = create_engine(target.url, target.schema)
        counts: Counter[str] = Counter()
        mode = "warm-up"

        def counted(*_: Any) -> None:
            counts[mode] += 1

        event.listen(engine.sync_engine, "before_cursor_execute", counted)
        probe = probe_engine(target)
        runtime = Runtime(engine, app, poll_interval=0.5)
        samples: dict[str, tuple[list[float], list[float]]] = {
            "off": ([], []),
            "on": ([], []),
        }
        runs: Counter[str] = Counter()
        transactions: Counter[str] = Counter()
        async with Client(create_engine(target.url, target.schema), app=app) as client:
            await client.deploy()
            async with runtime:
                assert runtime.handoff is not None and runtime.worker is not None
                reports = runtime.worker.reports
                await wake_samples(client, probe, 3, warm=True)
                for _ in range(rounds):
                    for mode in ("off", "on"):
                        _link(runtime, mode == "on", reports)
                        first, after, _ = await wake_samples(client, probe, per_round)
                        samples[mode][0].extend(first)
                        samples[mode][1].extend(after)
                        runs[mode] += per_round
                for _ in range(rounds):
                    for alone in ("off", "on"):
                        mode = f"{alone}, one at a time"  # statements not counted as wake's
                        _link(runtime, alone == "on", reports)
                        window.open()
                        for n in range(per_round):
                            started = [(await client.start(one, n)).run_id]
                            # Waited on through the probe, whose reads are not counted.
                            await _wait_until(partial(_finished, probe, started), 30, "the run")
                        transactions[alone] += window.count()
            await client.engine.dispose()
        await probe.dispose()
        await engine.dispose()
        print(f"workflow {wake.name!r}, {rounds} rounds x {per_round} runs per mode")
        for mode in ("off", "on"):
            first, after = samples[mode]
            print(
                f"hand-off {mode:>3}: start -> first task p50 {statistics.median(first):6.2f} ms, "
                f"signal -> next task p50 {statistics.median(after):6.2f} ms, "
                f"{counts[mode] / runs[mode]:5.1f} statements per wake run (idle polls "
                f"included); {transactions[mode] / (rounds * per_round):4.2f} real transactions "
                "per one-task run, one at a time"
            )
    finally:
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per_round))
