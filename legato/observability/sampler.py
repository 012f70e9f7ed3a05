"""The gauge sampler: reads queue depths every few seconds while metrics are enabled."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.loops import Loop
from legato.engine.repositories import stats
from legato.observability import metrics


class BacklogSampler(Loop):
    """Sets the decide- and task-queue gauges from two index reads per ``interval``:
    gauges cost the database a fixed trickle, however busy the queues are."""

    name = "metrics-sampler"

    def __init__(self, engine: AsyncEngine, *, interval: float = 5.0) -> None:
        super().__init__(poll_interval=interval, wakeups=None, channel=None)
        self.engine = engine

    async def tick(self) -> bool:
        async with self.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            decide = await stats.decide_backlog(autocommit)
            tasks = await stats.task_backlog(autocommit)
        metrics.recorder().backlog(decide, tasks, datetime.now(UTC))
        return False
