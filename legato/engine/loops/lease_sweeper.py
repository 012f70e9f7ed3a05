"""The lease sweeper: attempts whose worker vanished (its lease expired) are handed back
to the decider as timed out, through ``legato.engine.reports`` — the same path as a
worker's report, so a late report from that worker, or a second sweeper, is fenced out.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import task_queue, tasks
from legato.schema import TaskState
from legato.schema.values import TaskError


class LeaseSweeper(Loop):
    """Hands attempts whose worker vanished (lease expired) back to the decider as
    timed out."""

    name = "lease-sweeper"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(poll_interval=poll_interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.batch_size = batch_size
        self.swept = 0

    async def tick(self) -> bool:
        async with self.engine.begin() as conn:
            expired = await task_queue.expired(conn, self.batch_size)
            reports = [
                Report(
                    tasks.Transition(
                        run_id=item.run_id,
                        task_id=item.task_id,
                        attempt=item.attempt,
                        state=TaskState.TIMED_OUT,
                        error=TaskError(
                            type="LeaseExpired",
                            message="the worker running this attempt stopped heartbeating "
                            "(crashed, or exceeded the heartbeat timeout)",
                        ),
                        from_states=(TaskState.RUNNING, TaskState.QUEUED),
                    ),
                    queue_key=(item.queue, item.task_id),
                )
                for item in expired
            ]
            await apply_reports(conn, reports, "lease expired")
        self.swept += len(expired)
        return len(expired) >= self.batch_size
