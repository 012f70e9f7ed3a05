"""When schedules fire: next ticks and the catch-up plan (pure; no I/O, no clock).

A schedule's ticks are the times its cron expression matches in its time zone
(``cronsim`` evaluates the expression; a wall-clock time that a DST change skips
fires at the first minute after the gap, an ambiguous one fires once, at its
first occurrence), or ``epoch + k * every`` for an interval schedule (Unix epoch,
UTC: every 15 minutes fires at :00, :15, :30, :45 whatever the deploy time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from legato.errors import InvalidSchedule
from legato.schema.enums import CatchUp

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Timing:
    """A schedule's ticks: exactly one of ``cron`` (in ``timezone``) and ``every``."""

    cron: str | None
    every: timedelta | None
    timezone: str = "UTC"

    @classmethod
    def checked(cls, name: str, cron: object, every: object, timezone: object) -> Timing:
        """The timing of schedule ``name``, or ``InvalidSchedule`` naming the bad value."""
        if (cron is None) == (every is None):
            raise InvalidSchedule(
                f"schedule {name!r}: give exactly one of cron='...' or every=timedelta(...)"
            )
        if not isinstance(timezone, str):
            raise InvalidSchedule(f"schedule {name!r}: timezone must be a string, got {timezone!r}")
        if every is not None:
            if not isinstance(every, timedelta) or every <= timedelta(0):
                raise InvalidSchedule(
                    f"schedule {name!r}: every must be a positive timedelta, got {every!r}"
                )
            if timezone != "UTC":
                raise InvalidSchedule(
                    f"schedule {name!r}: timezone={timezone!r} applies to cron schedules only; "
                    "an interval schedule counts from the Unix epoch in UTC"
                )
            return cls(None, every, "UTC")
        if not isinstance(cron, str):
            raise InvalidSchedule(f"schedule {name!r}: cron must be a string, got {cron!r}")
        zone = _zone(name, timezone)
        try:
            CronSim(cron, datetime.now(zone))
        except CronSimError as exc:
            raise InvalidSchedule(
                f"schedule {name!r}: bad cron expression {cron!r}: {exc} "
                "(five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'; "
                "or six, with seconds first, e.g. '*/10 * * * * *')"
            ) from None
        return cls(cron, None, timezone)

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron!r} {self.timezone}"
        assert self.every is not None
        return f"every {self.every.total_seconds():g}s"


def _zone(name: str, timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"schedule {name!r}: unknown time zone {timezone!r} "
            "(an IANA name such as 'UTC' or 'Europe/Paris')"
        ) from None


def next_tick(timing: Timing, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC."""
    if timing.every is not None:
        steps = (after - EPOCH) // timing.every + 1
        return EPOCH + steps * timing.every
    assert timing.cron is not None
    local = after.astimezone(ZoneInfo(timing.timezone))
    return next(iter(CronSim(timing.cron, local))).astimezone(UTC)


def ticks_back(timing: Timing, until: datetime, since: datetime, limit: int) -> list[datetime]:
    """Up to ``limit`` ticks ``t`` with ``since <= t <= until``, latest first, in UTC."""
    found: list[datetime] = []
    if timing.every is not None:
        tick = EPOCH + ((until - EPOCH) // timing.every) * timing.every
        while tick >= since and len(found) < limit:
            found.append(tick)
            tick -= timing.every
        return found
    assert timing.cron is not None
    # cronsim's reverse iteration starts strictly before its start (or, with
    # microseconds, at the start's second): one microsecond on makes ``until`` included.
    start = (until + _ONE_MICROSECOND).astimezone(ZoneInfo(timing.timezone))
    for tick in CronSim(timing.cron, start, reverse=True):
        utc = tick.astimezone(UTC)
        if utc < since or len(found) >= limit:
            break
        found.append(utc)
    return found


@dataclass(frozen=True)
class Policy:
    """How a schedule catches up: ``catch_up``, the ALL bound and the SKIP grace."""

    catch_up: CatchUp = CatchUp.SKIP
    max_catch_up: int = 100
    grace: timedelta = timedelta(minutes=1)


@dataclass(frozen=True)
class Plan:
    """The ticks to start a run for now (oldest first) and the schedule's next fire."""

    ticks: tuple[datetime, ...]
    next_fire_at: datetime


def plan(
    timing: Timing,
    policy: Policy,
    next_fire_at: datetime,
    now: datetime,
    poll_interval: timedelta = timedelta(0),
) -> Plan:
    """What a due schedule does at ``now``: the ticks in ``[next_fire_at, now]`` are
    due; ALL fires up to ``max_catch_up`` of the latest of them, ONCE the latest, SKIP
    the latest only if it is at most ``grace`` old, not counting the ``poll_interval``
    of the loop that looks: a poll that comes up to one interval after the tick is on
    time, so a grace shorter than the interval (zero even) never drops a tick that a
    running decider reached at its next poll. The next fire is the first tick after
    ``now`` whatever was fired, so a tick never fires twice."""
    if next_fire_at > now:
        return Plan((), next_fire_at)
    limit = policy.max_catch_up if policy.catch_up is CatchUp.ALL else 1
    due = ticks_back(timing, now, next_fire_at, limit)
    if policy.catch_up is CatchUp.SKIP and due and now - due[0] > policy.grace + poll_interval:
        due = []
    return Plan(tuple(reversed(due)), next_tick(timing, now))


def idempotency_key(schedule: str, tick: datetime) -> str:
    """The start key of a schedule's run for ``tick``: one run per (schedule, tick)."""
    return f"schedule:{schedule}:{tick.astimezone(UTC).isoformat()}"
