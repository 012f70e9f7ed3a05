"""``Runtime.run_until_signalled``, the entry point of a process the runtime owns (the
CLI's ``worker``, ``decider``, ``timer`` and ``dev``): once started it freezes what
exists (``gc.freeze()``), so the cyclic collector's full collections, which paused the
event loop for tens of milliseconds at random moments, no longer walk it; SIGTERM stops
it gracefully."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Roles, Runtime
from tests.helpers import eventually


async def test_a_process_entry_point_freezes_what_it_started_with(engine: AsyncEngine) -> None:
    runtime = Runtime(
        engine, App(), roles=Roles(decider=False, worker=False, timer=True, deploy=False)
    )
    frozen = gc.get_freeze_count()
    running = asyncio.create_task(runtime.run_until_signalled())
    try:
        await eventually(lambda: gc.get_freeze_count() > frozen, "the freeze after start")
    finally:
        if not running.done():
            # Its handler is installed before the runtime starts: SIGTERM stops it alone.
            os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(running, 30)
        gc.unfreeze()
