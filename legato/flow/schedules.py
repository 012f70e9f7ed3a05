"""Schedule declarations: ``Workflow.schedule(...)`` builds a :class:`Schedule`.

A schedule belongs to its workflow and is deployed with it (``legato deploy``, a
decider's start, ``Client.deploy``); the decider processes fire it
(``legato.engine.loops.schedules``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pydantic import JsonValue

from legato.errors import InvalidSchedule
from legato.flow.ticks import Policy, Timing
from legato.limits import MAX_DURATION
from legato.schema.enums import CatchUp

# The finest interval is cron's finest tick; the longest is the longest duration any
# option takes (a tick or a grace near ``timedelta.max`` overflows the datetimes it is
# added to).
MIN_EVERY = timedelta(seconds=1)


@dataclass(frozen=True)
class Schedule:
    """A checked schedule: its name, workflow, JSON input, ticks and catch-up policy."""

    name: str
    workflow: str
    input: JsonValue
    timing: Timing
    policy: Policy

    @classmethod
    def declare(
        cls,
        name: str,
        workflow: str,
        input: JsonValue,
        *,
        cron: object,
        every: object,
        timezone: object,
        catch_up: object,
        max_catch_up: object,
        grace: object,
    ) -> Schedule:
        """Check every option but the name (``Workflow.schedule`` checks it first),
        naming the bad value in an ``InvalidSchedule``."""
        timing = Timing.checked(name, cron, every, timezone)
        if timing.every is not None and not MIN_EVERY <= timing.every <= MAX_DURATION:
            raise InvalidSchedule(
                f"schedule {name!r}: every={timing.every!r} must be from 1 second to "
                f"{MAX_DURATION.days} days, e.g. every=timedelta(minutes=5)"
            )
        try:
            policy_kind = CatchUp(str(catch_up).upper())
        except ValueError:
            raise InvalidSchedule(
                f"schedule {name!r}: catch_up must be one of "
                f"{[c.value.lower() for c in CatchUp]}, got {catch_up!r}"
            ) from None
        if (
            isinstance(max_catch_up, bool)
            or not isinstance(max_catch_up, int)
            or not (1 <= max_catch_up <= 10_000)
        ):
            raise InvalidSchedule(
                f"schedule {name!r}: max_catch_up must be an int from 1 to 10000, "
                f"got {max_catch_up!r}"
            )
        if not isinstance(grace, timedelta) or not timedelta(0) <= grace <= MAX_DURATION:
            raise InvalidSchedule(
                f"schedule {name!r}: grace must be a timedelta from zero to "
                f"{MAX_DURATION.days} days, got {grace!r}"
            )
        return cls(name, workflow, input, timing, Policy(policy_kind, max_catch_up, grace))
