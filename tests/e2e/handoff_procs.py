"""A process with every role (hand-offs on), for the hand-off kill test:
``python -m tests.e2e.handoff_procs DATABASE_URL HANDED_FILE``. Every 20 ms it writes how
many attempts its decisions have handed to its worker so far."""

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
    runtime = Runtime(engine, app, lease=timedelta(seconds=1), poll_interval=0.2, grace_period=2.0)
    assert runtime.handoff is not None
    handoff = runtime.handoff

    async def publish() -> None:
        while True:
            await asyncio.to_thread(write_whole, handed_file, str(handoff.handed))
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
