"""Periodic maintenance in the decider process: partitions ahead, expired idempotency
keys, closed debounce windows and cached task outputs pruned, idle concurrency slots
dropped."""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import (
    concurrency,
    debounces,
    idempotency_keys,
    partitions,
    task_cache,
)

log = logging.getLogger("legato.maintenance")


class MaintenanceLoop(Loop):
    """Creates partitions ahead (under the functions' advisory lock, so every decider
    process may run it), prunes expired idempotency keys and cached outputs, and drops
    concurrency slots idle for a day."""

    name = "maintenance"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        interval: float = 3600.0,
        months_ahead: int = 3,
        days_ahead: int = 7,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(poll_interval=interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.months_ahead = months_ahead
        self.days_ahead = days_ahead

    async def tick(self) -> bool:
        async with self.engine.begin() as conn:
            created = await partitions.ensure(conn, self.months_ahead, self.days_ahead)
        async with self.engine.begin() as conn:
            pruned = await idempotency_keys.prune(conn)
            closed = await debounces.prune(conn)
        async with self.engine.begin() as conn:
            uncached = await task_cache.prune(conn)
            idle = await concurrency.prune(conn)
        if uncached or idle:
            log.info("pruned %d expired cached outputs, %d idle slots", uncached, idle)
        if created:
            log.info("created partitions: %s", ", ".join(created))
        if pruned:
            log.info("pruned %d expired idempotency keys", pruned)
        if closed:
            log.info("pruned %d closed debounce windows", closed)
        return False
