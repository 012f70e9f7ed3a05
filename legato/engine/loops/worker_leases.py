"""The worker's lease keeper: every third of the lease, or at once when the decider
announces cancelled attempts, it extends the leases of the attempts still running
(``Worker.extend_leases``, which also cancels those the worker no longer holds), by
:func:`extend_leases`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.repositories import queue_leases
from legato.engine.transport.wakeups import Wakeups
from legato.outages import database_failure, is_database_error, traceback_at_debug
from legato.schema import Shards

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


async def extend_leases(
    engine: AsyncEngine,
    shards: Shards,
    owner: str,
    lease: timedelta,
    keys: Sequence[tuple[int, str, uuid.UUID]],
) -> set[uuid.UUID]:
    """Extend ``owner``'s leases of these attempts (shard, queue, task_id); the task ids
    still leased to it. One statement on one PostgreSQL; on a distributed one a
    transaction per key, so no transaction holds one key's rows while it waits for
    another's (a report flush removes finished attempts' rows meanwhile)."""
    if not shards.distributed:  # one statement, atomic on its own
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return await queue_leases.extend_held(autocommit, owner, keys, lease)
    by_shard: dict[int, list[tuple[str, uuid.UUID]]] = {}
    for shard, queue, task_id in keys:
        by_shard.setdefault(shard, []).append((queue, task_id))
    held: set[uuid.UUID] = set()
    for shard, queue_keys in sorted(by_shard.items()):
        async with engine.begin() as conn:
            held |= await queue_leases.extend_leases(conn, shard, owner, queue_keys, lease)
    return held
