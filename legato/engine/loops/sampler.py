"""The gauge sampler: reads queue depths every few seconds while metrics are enabled."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import stats
from legato.observability import metrics


class BacklogSampler(Loop):
    """Sets the decide- and task-queue gauges from two index reads per ``interval``:
    gauges cost the database a fixed trickle, however busy the queues are. Each of
    ``queues`` (the ones the app's tasks name) has a series from the first sample,
    reading 0 while it is empty."""

    name = "metrics-sampler"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        queues: Iterable[str] = (),
        interval: float = 5.0,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(poll_interval=interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.queues = frozenset(queues)

    async def tick(self) -> bool:
        async with self.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            decide = await stats.decide_backlog(autocommit)
            tasks = await stats.task_backlog(autocommit)
        metrics.recorder().backlog(decide, with_empty_queues(tasks, self.queues), datetime.now(UTC))
        return False


def with_empty_queues(tasks: Sequence[stats.Backlog], queues: Iterable[str]) -> list[stats.Backlog]:
    """``tasks`` (the queues with work ready) plus an empty backlog for each of
    ``queues`` without any: the read returns no row for an empty queue."""
    busy = {backlog.queue for backlog in tasks}
    idle = sorted(set(queues) - busy)
    return [*tasks, *(stats.Backlog(queue, 0, None) for queue in idle)]
