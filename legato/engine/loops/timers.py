"""The timer loop: sleeps, event timeouts, task and run timeouts.

A due timer becomes a fenced transition of a task row plus a decide request,
through ``legato.engine.reports`` — the same path as a worker's report (and the
lease sweeper's, ``legato.engine.loops.lease_sweeper``). A timer re-checks the state it
guards (the fence): a timeout armed for an attempt that has since finished matches
nothing and changes nothing.

Timers are taken one shard key at a time (``shard = $k AND fire_at <= $now ORDER BY
fire_at``, the primary key (shard, fire_at, id)), from the keys the loop holds: every
held key on each poll interval, and again at once a key whose take came back full.
Each key's batch is its own transaction, all of its statements within the key.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.reports import apply_reports
from legato.engine.repositories import decide_queue, run_timeouts, tasks, timers
from legato.engine.timer_semantics import report_for, start_to_close_due
from legato.engine.transport.wakeups import Wakeups
from legato.schema import Shards, TimerKind

_QUEUED_KINDS = frozenset({TimerKind.SCHEDULE_TO_START, TimerKind.START_TO_CLOSE})
# Timers that guard a run, not a task row: they mark the run and ask for a decision.
_RUN_KINDS = frozenset({TimerKind.RUN_TIMEOUT})


async def time_out_runs(conn: AsyncConnection, shard: int, run_ids: Sequence[uuid.UUID]) -> None:
    """Mark the runs of key ``shard`` whose execution_timeout passed and have the decider
    time them out."""
    marked = await run_timeouts.mark_timed_out(conn, shard, run_ids)
    await decide_queue.enqueue(conn, shard, marked, "run timed out")


def _queue_of(timing: tasks.AttemptTiming | None) -> str | None:
    return None if timing is None else timing.queue


#: How often the timer loop looks for due timers at most: a timer fires within it.
TIMER_POLL_INTERVAL = 0.5


class TimerLoop(Loop):
    """Fires due timers in batches, one shard key at a time, from the keys it holds
    (``held``, every key of ``shards`` by default); re-arms those capped at the partition
    horizon."""

    name = "timer"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shards: Shards,
        held: HeldShards | None = None,
        wakeups: Wakeups | None = None,
        batch_size: int = 100,
        poll_interval: float = TIMER_POLL_INTERVAL,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(
            poll_interval=poll_interval, wakeups=wakeups, channel=None, restarts=restarts
        )
        self.engine = engine
        self.shards = shards
        self.held: HeldShards = AllShards(shards) if held is None else held
        self.batch_size = batch_size
        self.fired = 0
        self._full: dict[int, None] = {}  # keys whose last take was full: taken again at once

    async def tick(self) -> bool:
        """A take from each held key (after a poll) or from each key whose last take was
        full (a busy tick); True when a take came back full."""
        held = self.held.held()
        keys = [shard for shard in self._full if shard in held] if self._full else list(held)
        self._full.clear()
        if not self.shards.distributed:
            # One PostgreSQL: one take spans the keys.
            if keys and await self._fire_held(keys):
                self._full.update(dict.fromkeys(keys))
            return bool(self._full)
        for shard in keys:
            if await self._fire(shard):
                self._full[shard] = None
        return bool(self._full)

    async def _fire_held(self, keys: list[int]) -> bool:
        """Fire the due timers of any of ``keys`` in one transaction, acting on each
        key's timers in its key; True when the take was a full batch."""
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            due = await timers.take_due_held(conn, keys, self.batch_size, now)
            by_key: dict[int, list[timers.DueTimer]] = {}
            for timer in due:
                by_key.setdefault(self.shards.of_run(timer.run_id), []).append(timer)
            for shard in sorted(by_key):
                await self._act(conn, shard, by_key[shard], now)
        return len(due) >= self.batch_size

    async def _fire(self, shard: int) -> bool:
        """Fire the due timers of key ``shard`` in one transaction; True when the take was
        a full batch."""
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            due = await timers.take_due(conn, shard, self.batch_size, now)
            await self._act(conn, shard, list(due), now)
        return len(due) >= self.batch_size

    async def _act(
        self, conn: AsyncConnection, shard: int, due: list[timers.DueTimer], now: datetime
    ) -> None:
        """Re-arm the taken timers of key ``shard`` that are not due yet, fire the others."""
        if not due:
            return
        queued = [t for t in due if t.kind in _QUEUED_KINDS]
        timing = await tasks.timings(conn, shard, [(t.run_id, t.task_id) for t in queued])
        for timer in [t for t in queued if t.kind is TimerKind.START_TO_CLOSE]:
            real_due = start_to_close_due(timer, timing.get(timer.task_id))
            if real_due is None:
                due.remove(timer)
            elif real_due != timer.due_at:
                due[due.index(timer)] = timer._replace(due_at=real_due)
        early = [t for t in due if t.due_at > now]
        await timers.arm(conn, shard, early, now)
        fired = [t for t in due if t.due_at <= now]
        await time_out_runs(conn, shard, [t.run_id for t in fired if t.kind in _RUN_KINDS])
        reports = [
            report_for(t, shard, _queue_of(timing.get(t.task_id)))
            for t in fired
            if t.kind not in _RUN_KINDS
        ]
        await apply_reports(conn, reports, "timer fired", layout=self.shards)
        self.fired += len(fired)
