"""The worker's lease keeper: every third of the lease, or at once when the decider
announces cancelled attempts, it extends the leases of the attempts still running
(``Worker.extend_leases``, which also cancels those the worker no longer holds)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from legato.engine.transport.wakeups import Wakeups
from legato.outages import database_failure, is_database_error, traceback_at_debug

log = logging.getLogger("legato.worker")


async def keep_leases(
    lease: timedelta,
    wakeups: Wakeups | None,
    cancel_channel: str,
    extend: Callable[[], Awaitable[None]],
) -> None:
    """Run ``extend`` every third of ``lease`` (at least every 50 ms) and on each NOTIFY
    of ``cancel_channel``, until cancelled; a database failure is logged and retried at
    the next interval, anything else raised (a bug: the keeper's supervisor restarts it)."""
    interval = max(lease.total_seconds() / 3, 0.05)
    cancelled = asyncio.Event() if wakeups is None else await wakeups.subscribe(cancel_channel)
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), timeout=interval)
            cancelled.clear()
            try:
                await extend()
            except Exception as error:
                if not is_database_error(error):
                    raise
                log.warning(
                    "extending leases failed (%s); retrying in %.1fs",
                    database_failure(error),
                    interval,
                    exc_info=traceback_at_debug(log, error),
                )
    finally:
        if wakeups is not None:
            await wakeups.unsubscribe(cancel_channel, cancelled)
