"""Firing schedules: the schedule loop (in every decider process), deploying a
workflow's schedules, and pause / resume / trigger.

Exactly one run per (schedule, tick), however many decider processes run: a due
schedule row is taken ``FOR UPDATE SKIP LOCKED`` and moved to its next tick in the
transaction that starts the runs, and each run is started with the idempotency
key ``schedule:<name>:<tick>`` (``legato.flow.ticks.idempotency_key``), so
a tick that is somehow taken twice (a redeploy that moved the next tick back)
still starts one run. No leader, no lease.

A tick's run lives in the shard key of its start key (``Shards.of_key``), its
idempotency row beside it, so each run's writes stay within one key; the schedule rows
themselves are a global table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import definitions, idempotency_keys, runs, schedules
from legato.errors import InvalidSchedule, UnknownSchedule
from legato.flow import WorkflowDefinition
from legato.flow.schedules import Schedule
from legato.flow.ticks import idempotency_key, next_tick, plan
from legato.schema import Shards

# How long a tick's start key is kept: far longer than any catch-up.
KEY_RETENTION = timedelta(days=30)


def utc_now() -> datetime:
    return datetime.now(UTC)


async def deploy_schedules(
    conn: AsyncConnection, workflows: Iterable[WorkflowDefinition], now: datetime
) -> None:
    """Store each workflow's declared schedules, and delete the ones it no longer
    declares (inside the deploy's transaction, under each workflow's deploy lock).

    Raises ``InvalidSchedule`` if a name is declared twice or belongs to another
    workflow's stored schedule.
    """
    seen: dict[str, str] = {}
    for workflow in workflows:
        for name in workflow.schedules:
            other = seen.setdefault(name, workflow.name)
            if other != workflow.name:
                raise InvalidSchedule(
                    f"schedule {name!r} is declared by workflows {other!r} and "
                    f"{workflow.name!r}; schedule names are global: rename one"
                )
        declared = [(s, next_tick(s.timing, now)) for s in workflow.schedules.values()]
        taken = await schedules.sync_workflow(conn, workflow.name, declared)
        if taken:
            raise InvalidSchedule(
                f"schedule {taken[0]!r} of workflow {workflow.name!r} already belongs to "
                "another workflow's deployed schedule: rename one"
            )


async def start_scheduled(
    conn: AsyncConnection, shards: Shards, schedule: Schedule, keys: Sequence[str]
) -> list[uuid.UUID]:
    """Start one run of ``schedule``'s workflow per start key, each key at most once
    ever (a key already used starts nothing); the runs started. Each run and its key's
    idempotency row live in the start key's shard key: one claim per start key, then
    one start statement per shard key the runs fall in."""
    version = await definitions.deployed_version(conn, schedule.workflow)
    if version is None:
        raise LookupError(f"schedule {schedule.name!r}: workflow {schedule.workflow!r} is gone")
    started: dict[int, list[runs.NewRun]] = {}
    for key in keys:
        shard = shards.of_key(key)
        run_id = shards.new_run_id(shard)
        expires = utc_now() + KEY_RETENTION
        claimed = await idempotency_keys.claim(conn, shard, schedule.workflow, key, run_id, expires)
        if claimed is None:
            started.setdefault(shard, []).append(
                runs.NewRun(run_id, schedule.workflow, version, schedule.input, idempotency_key=key)
            )
    for shard, new_runs in sorted(started.items()):
        await runs.start_runs(conn, shard, new_runs, f"schedule {schedule.name}")
    return [run.run_id for new_runs in started.values() for run in new_runs]


async def fire_due(
    conn: AsyncConnection,
    now: datetime,
    limit: int,
    poll_interval: timedelta,
    shards: Shards | None = None,
) -> int:
    """Fire the schedules due at ``now`` by their catch-up policy and move each to its
    next tick (schedule loop, polling every ``poll_interval``); the number of schedules
    taken. The installation's keys are read when ``shards`` is not given."""
    due = await schedules.take_due(conn, now, limit)
    if due and shards is None:
        shards = await runs.installed_shards(conn)
    for stored in due:
        assert shards is not None
        schedule = stored.schedule
        fire = plan(schedule.timing, schedule.policy, stored.next_fire_at, now, poll_interval)
        await start_scheduled(
            conn, shards, schedule, [idempotency_key(schedule.name, t) for t in fire.ticks]
        )
        last = fire.ticks[-1] if fire.ticks else None
        await schedules.advance(conn, schedule.name, fire.next_fire_at, last)
    return len(due)


class ScheduleLoop(Loop):
    """Starts the runs of due schedules; one per decider process, sharing the rows."""

    name = "scheduler"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        clock: Callable[[], datetime] = utc_now,
        restarts: RestartPolicy | None = None,
        shards: Shards | None = None,
    ) -> None:
        super().__init__(poll_interval=poll_interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.batch_size = batch_size
        self.clock = clock
        # The installation's keys (the Runtime's); read on the first tick otherwise.
        self.shards = shards

    async def tick(self) -> bool:
        async with self.engine.begin() as conn:
            if self.shards is None:
                self.shards = await runs.installed_shards(conn)
            taken = await fire_due(
                conn,
                self.clock(),
                self.batch_size,
                timedelta(seconds=self.poll_interval),
                self.shards,
            )
        return taken >= self.batch_size


# -- operations (legato schedules ...) --------------------------------------------------------


async def _known(conn: AsyncConnection, name: str) -> UnknownSchedule:
    return UnknownSchedule(
        f"unknown schedule {name!r}; deployed schedules: {await schedules.names(conn) or 'none'}"
    )


async def pause(engine: AsyncEngine, name: str) -> bool:
    """Stop firing ``name`` until resumed: True, or False when it was already paused
    (the row is left as it was). Raises ``UnknownSchedule``."""
    async with engine.begin() as conn:
        stored = await schedules.get(conn, name, lock=True)
        if stored is None:
            raise await _known(conn, name)
        if stored.paused:
            return False
        await schedules.set_paused(conn, name, True)
        return True


async def resume(engine: AsyncEngine, name: str, now: datetime | None = None) -> datetime | None:
    """Fire a paused ``name`` again from its first tick after now (ticks while paused
    never fire): its next fire, or None when it was not paused (the row, and so its
    next fire, is left as it was). Raises ``UnknownSchedule``."""
    async with engine.begin() as conn:
        stored = await schedules.get(conn, name, lock=True)
        if stored is None:
            raise await _known(conn, name)
        if not stored.paused:
            return None
        following = next_tick(stored.schedule.timing, now or utc_now())
        await schedules.set_paused(conn, name, False, following)
        return following


async def trigger(engine: AsyncEngine, name: str) -> uuid.UUID:
    """Start one run of ``name`` now, with its input, paused or not; it leaves the
    schedule's ticks alone. The run's id; raises ``UnknownSchedule``."""
    async with engine.begin() as conn:
        stored = await schedules.get(conn, name)
        if stored is None:
            raise await _known(conn, name)
        key = f"schedule:{name}:trigger:{uuid.uuid4().hex}"
        shards = await runs.installed_shards(conn)
        (run_id,) = await start_scheduled(conn, shards, stored.schedule, [key])
        return run_id


async def list_schedules(engine: AsyncEngine) -> list[schedules.StoredSchedule]:
    """Every deployed schedule, by name."""
    async with engine.connect() as conn:
        return await schedules.list_all(conn)
