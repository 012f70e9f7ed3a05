"""A debounced start, in the caller's transaction: open the (workflow, key) window with
a new run due ``window`` from now, or, while the window's run is still pending, give it
this call's input and push its start back; once it has started, open a new window.

Race-safe by two locks taken in one order: the window row (every call of the window
waits for the one before it to commit) and then the pending run's decide row (a
decider taking the run holds it until its decision commits, so a call either replaces
the input before any decision or sees the run started). See docs/design.md, "Debounce".
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.debounce import Debounce
from legato.engine.repositories import debounces, runs

# A closed window's row is kept this long past its last possible start, so a decider
# running behind still finds the call after the window a new window, then pruned.
KEPT_AFTER_START = timedelta(hours=1)


async def start_debounced(
    conn: AsyncConnection, shard: int, debounce: Debounce, new: runs.NewRun, now: datetime
) -> uuid.UUID:
    """The run this call's input will run in (``new``'s id if it opens a window)."""
    expires_at = now + debounce.window + KEPT_AFTER_START
    name = new.workflow_name
    window_run, first_at = await debounces.claim(
        conn, shard, name, debounce.key, new.run_id, now, expires_at
    )
    if window_run != new.run_id:
        if await debounces.lock_pending(conn, shard, window_run):
            starts_at = debounce.starts_at(now, first_at)
            await debounces.replace_pending(conn, shard, window_run, new.input, starts_at)
            return window_run
        await debounces.reopen(conn, shard, name, debounce.key, new.run_id, now, expires_at)
    await runs.start_runs(
        conn, shard, [replace(new, scheduled_at=now + debounce.window)], "debounced start"
    )
    return new.run_id
