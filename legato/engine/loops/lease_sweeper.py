"""The lease sweeper: attempts whose worker vanished (its lease expired) are handed back
to the decider as timed out, through ``legato.engine.reports`` — the same path as a
worker's report, so a late report from that worker, or a second sweeper, is fenced out.

It sweeps the shard keys it holds (``HeldShards``), one key per tick in turn: a key
whose sweep found a full batch is swept again before the sweeper sleeps.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import queue_leases, tasks
from legato.schema import Shards, TaskState
from legato.schema.values import TaskError


class LeaseSweeper(Loop):
    """Hands attempts whose worker vanished (lease expired) back to the decider as
    timed out, in the keys it holds (``held``, every key of ``shards`` by default)."""

    name = "lease-sweeper"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shards: Shards,
        held: HeldShards | None = None,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(poll_interval=poll_interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.shards = shards
        self.held: HeldShards = AllShards(shards) if held is None else held
        self.batch_size = batch_size
        self.swept = 0
        # The held keys still to sweep this round, in order; refilled when it runs out
        # (every poll interval, since a round that found no full batch ends in a sleep).
        self._due: list[int] = []

    async def tick(self) -> bool:
        if not self.shards.distributed:
            # One PostgreSQL: one read spans every held key.
            held = list(self.held.held())
            return bool(held) and await self.sweep(held)
        if not self._due:
            self._due = list(self.held.held())
            if not self._due:
                return False
        shard = self._due.pop(0)
        full = await self.sweep([shard])
        if full:
            self._due.append(shard)  # more may have expired there
        return bool(self._due)

    async def sweep(self, keys: list[int]) -> bool:
        """Time out up to ``batch_size`` expired leases of ``keys`` (one key in the
        distributed layout) in one transaction; whether the batch was full."""
        async with self.engine.begin() as conn:
            if self.shards.distributed:
                (shard,) = keys
                expired = await queue_leases.expired(conn, shard, self.batch_size)
            else:
                expired = await queue_leases.expired_held(conn, keys, self.batch_size)
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
                    shard=self.shards.of_run(item.run_id),
                    queue_key=(item.queue, item.task_id),
                )
                for item in expired
            ]
            await apply_reports(conn, reports, "lease expired", layout=self.shards)
        self.swept += len(expired)
        return len(expired) >= self.batch_size
