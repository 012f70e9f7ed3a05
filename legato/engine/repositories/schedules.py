"""``schedules``: declared schedules and their next tick; small and unpartitioned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import DateTime, Integer, and_, bindparam, case, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.claims import locked
from legato.flow.schedules import Schedule
from legato.flow.ticks import Policy, Timing
from legato.schema import Schedules


@dataclass(frozen=True)
class StoredSchedule:
    """A ``schedules`` row."""

    schedule: Schedule
    paused: bool
    next_fire_at: datetime
    last_tick_at: datetime | None


_COLUMNS = (
    Schedules.name,
    Schedules.workflow_name,
    Schedules.input,
    Schedules.cron,
    Schedules.interval_seconds,
    Schedules.timezone,
    Schedules.catch_up,
    Schedules.max_catch_up,
    Schedules.grace_seconds,
    Schedules.paused,
    Schedules.next_fire_at,
    Schedules.last_tick_at,
)


def _stored(row: Sequence[Any]) -> StoredSchedule:
    name, workflow, input_, cron, seconds, zone, catch_up, bound, grace, paused, next_, last = row
    every = None if seconds is None else timedelta(seconds=seconds)
    schedule = Schedule(
        name,
        workflow,
        input_,
        Timing(cron, every, zone),
        Policy(catch_up, bound, timedelta(seconds=grace)),
    )
    return StoredSchedule(schedule, paused, next_, last)


def _values(schedule: Schedule) -> dict[str, object]:
    every = schedule.timing.every
    return {
        "name": schedule.name,
        "workflow_name": schedule.workflow,
        "input": schedule.input,
        "cron": schedule.timing.cron,
        "interval_seconds": None if every is None else every.total_seconds(),
        "timezone": schedule.timing.timezone,
        "catch_up": schedule.policy.catch_up,
        "max_catch_up": schedule.policy.max_catch_up,
        "grace_seconds": schedule.policy.grace.total_seconds(),
    }


async def sync_workflow(
    conn: AsyncConnection,
    workflow: str,
    declared: Sequence[tuple[Schedule, datetime]],
) -> list[str]:
    """Make ``workflow``'s stored schedules exactly ``declared`` (deploy, under the
    workflow's deploy lock): upsert each with its first tick, delete the others.

    An upsert keeps the stored next tick when the timing is unchanged (a redeploy
    after downtime then catches up by policy) and the paused flag always. Returns
    the declared names held by another workflow's schedule, which are not written.
    Primary key, and ``ix_schedules_workflow_name`` for the delete.
    """
    names = [schedule.name for schedule, _ in declared]
    await conn.execute(
        delete(Schedules.table).where(
            Schedules.workflow_name == workflow, Schedules.name.not_in(names)
        )
    )
    if not declared:
        return []
    statement = insert(Schedules.table).values(
        [{**_values(schedule), "next_fire_at": first} for schedule, first in declared]
    )
    new = statement.excluded
    same_timing = and_(
        Schedules.cron.is_not_distinct_from(new.cron),
        Schedules.interval_seconds.is_not_distinct_from(new.interval_seconds),
        Schedules.timezone == new.timezone,
    )
    result = await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[Schedules.name],
            set_={
                **{key: new[key] for key in _values(declared[0][0]) if key != "name"},
                "next_fire_at": case((same_timing, Schedules.next_fire_at), else_=new.next_fire_at),
                # The deployer's clock: Citus refuses now() in an upsert's SET on a
                # table in its metadata (schedules, on the coordinator).
                "updated_at": datetime.now(UTC),
            },
            where=Schedules.workflow_name == new.workflow_name,
        ).returning(Schedules.name)
    )
    written = set(result.scalars())
    return [name for name in names if name not in written]


async def take_due(conn: AsyncConnection, now: datetime, limit: int) -> list[StoredSchedule]:
    """Lock up to ``limit`` unpaused schedules due at ``now`` for this transaction
    (schedule loop), earliest first; ``SKIP LOCKED``, so decider processes share them
    and a tick is taken by one of them. Served by ``ix_schedules_due``."""
    result = await conn.execute(_take_due_statement(), {"now": now, "limit": limit})
    return [_stored(row) for row in result]


@cache
def _take_due_statement() -> Any:
    due = locked(
        select(Schedules.name)
        .where(
            Schedules.paused.is_(False),
            Schedules.next_fire_at <= bindparam("now", type_=DateTime(timezone=True)),
        )
        .order_by(Schedules.next_fire_at)
        .limit(bindparam("limit", type_=Integer())),
        "due",
    )
    return select(*_COLUMNS).join(due, Schedules.name == due.c.name)


async def advance(
    conn: AsyncConnection, name: str, next_fire_at: datetime, last_tick: datetime | None
) -> None:
    """Move a taken schedule to its next tick, recording the last tick fired
    (schedule loop). Primary key."""
    values: dict[str, object] = {"next_fire_at": next_fire_at, "updated_at": func.now()}
    if last_tick is not None:
        values["last_tick_at"] = last_tick
    await conn.execute(update(Schedules.table).where(Schedules.name == name).values(values))


async def get(conn: AsyncConnection, name: str, *, lock: bool = False) -> StoredSchedule | None:
    """One schedule (``legato schedules trigger|pause|resume``), row-locked if ``lock``.
    Primary key."""
    statement = select(*_COLUMNS).where(Schedules.name == name)
    if lock:
        statement = statement.with_for_update()
    row = (await conn.execute(statement)).first()
    return None if row is None else _stored(row)


async def list_all(conn: AsyncConnection) -> list[StoredSchedule]:
    """Every schedule, by name (``legato schedules list``). Primary key order."""
    result = await conn.execute(select(*_COLUMNS).order_by(Schedules.name))
    return [_stored(row) for row in result]


async def names(conn: AsyncConnection) -> list[str]:
    """Every schedule's name (the error for an unknown one). Primary key."""
    result = await conn.execute(select(Schedules.name).order_by(Schedules.name))
    return list(result.scalars())


async def set_paused(
    conn: AsyncConnection, name: str, paused: bool, next_fire_at: datetime | None = None
) -> bool:
    """Pause or resume a schedule (``legato schedules pause|resume``); a resume also
    sets the next tick (the first after now). False if there is no such schedule.
    Primary key."""
    values: dict[str, object] = {"paused": paused, "updated_at": func.now()}
    if next_fire_at is not None:
        values["next_fire_at"] = next_fire_at
    result = await conn.execute(
        update(Schedules.table)
        .where(Schedules.name == name)
        .values(values)
        .returning(Schedules.name)
    )
    return result.first() is not None
