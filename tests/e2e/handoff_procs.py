"""A process with every role (hand-offs on), for the hand-off kill test:
``python -m tests.e2e.handoff_procs DATABASE_URL HANDED_FILE``. Every 20 ms it writes how
many attempts its decisions have handed to its worker so far. Its shard leases are short
(2 s), so the keys of a killed victim move to the survivor soon after the kill."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import timedelta
from pathlib import Path

from legato import Runtime
from legato.db import create_engine
from tests.e2e.handoff_flows import app
from tests.helpers import write_whole


async def main(database_url: str, handed_file: Path) -> None:
    engine = create_engine(database_url, "legato")
    runtime = Runtime(
        engine,
        app,
        lease=timedelta(seconds=1),
        shard_lease=timedelta(seconds=2),
        # No poll while the test runs: each poll starts the worker's claim round (one
        # claim per key, each reserving every free slot), and a decision meanwhile hands
        # nothing off; on a loaded machine the rounds overlapped nearly every decision.
        # Its decisions and claims are woken by NOTIFY and by each other.
        poll_interval=60,
        grace_period=2.0,
    )

    async def publish() -> None:
        while True:
            # The hand-off is built by ``start`` (inside ``run_until_signalled``).
            handoff = runtime.handoff
            handed = 0 if handoff is None else handoff.handed
            await asyncio.to_thread(write_whole, handed_file, str(handed))
            await asyncio.sleep(0.02)

    publisher = asyncio.create_task(publish())
    try:
        await runtime.run_until_signalled()
    finally:
        publisher.cancel()
        await engine.dispose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
