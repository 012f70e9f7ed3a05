"""The checks of ``Client``'s arguments: each raises the typed error that names the bad
value and what to pass instead, before anything is written."""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta
from typing import TypeGuard

from legato.errors import ConfigurationError, InvalidArgument, InvalidRunId
from legato.limits import MAX_DURATION
from legato.schema import RunStatus

RunId = uuid.UUID | str


def as_run_id(value: object) -> uuid.UUID:
    """A run id given as a ``uuid.UUID`` or its string form; ``InvalidRunId`` otherwise."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    shown = repr(value) if len(repr(value)) <= 80 else f"{repr(value)[:70]}..."
    raise InvalidRunId(
        f"run id {shown} is not a UUID: pass a uuid.UUID or its string form, "
        "e.g. the run_id of a RunHandle"
    )


def check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    # `not 0 <= timeout` also refuses NaN.
    if not _is_number(timeout) or not 0 <= timeout < math.inf:
        raise InvalidArgument(
            f"timeout {timeout!r} must be a finite number of seconds >= 0, or None to wait forever"
        )
    return float(timeout)


def check_max_payload(value: object) -> None:
    check_bytes("max_payload_bytes", value)


def check_bytes(option: str, value: object) -> int:
    """A size option: a positive int of bytes."""
    if not _is_int(value) or value < 1:
        raise ConfigurationError(f"{option}={value!r} must be a positive int of bytes")
    return value


# The ranges of the numeric options, the same in the Python API and on the command line.
MAX_CONCURRENCY = 10_000
MAX_DECIDERS = 64
MAX_BATCH_SIZE = 10_000
MAX_POLL_INTERVAL = 3600.0
MAX_SECONDS = 366 * 86400.0


def check_count(option: str, value: object, most: int = MAX_CONCURRENCY, least: int = 1) -> int:
    """A count option (``concurrency``, ``deciders``, a batch size): an int from ``least``
    to ``most``; ``ConfigurationError`` naming the option and the value otherwise."""
    if not _is_int(value) or not least <= value <= most:
        raise ConfigurationError(f"{option}={value!r} must be an int from {least} to {most}")
    return value


def check_seconds(option: str, value: object, most: float = MAX_SECONDS) -> float:
    """A duration option given in seconds: a finite number from 0 to ``most``."""
    # `not 0 <= value` also refuses NaN.
    if not _is_number(value) or not 0 <= value <= most:
        raise ConfigurationError(
            f"{option}={value!r} must be a number of seconds from 0 to {most:g}"
        )
    return float(value)


def check_poll_interval(value: object) -> float:
    return check_positive_seconds("poll_interval", value, MAX_POLL_INTERVAL)


def check_positive_seconds(option: str, value: object, most: float = MAX_SECONDS) -> float:
    """A duration option given in seconds that zero makes meaningless: above 0, at most
    ``most``."""
    if not _is_number(value) or not 0 < value <= most:
        raise ConfigurationError(
            f"{option}={value!r} must be a positive number of seconds, at most {most:g}"
        )
    return float(value)


def check_duration(
    option: str, value: object, example: str, most: timedelta = timedelta(days=366)
) -> timedelta:
    """A duration option given as a ``timedelta``: above zero and at most ``most`` (a
    near ``timedelta.max`` overflows the datetimes it is added to)."""
    if not isinstance(value, timedelta) or not timedelta(0) < value <= most:
        raise ConfigurationError(
            f"{option}={value!r} must be a timedelta above zero and at most {most.days} "
            f"days, e.g. {example}"
        )
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def run_status(value: object) -> RunStatus:
    if isinstance(value, str) and value in RunStatus.__members__.values():
        return RunStatus(value)
    known = ", ".join(s.value for s in RunStatus)
    raise InvalidArgument(f"status={value!r} is not a run status ({known})")


# ``run_events.seq`` is a bigint.
MAX_SEQ = 2**63 - 1


def check_after_seq(after_seq: object, option: str = "after_seq") -> int:
    """A cursor of a run's history or progress, named ``option`` as its caller calls it."""
    if not _is_int(after_seq) or not 0 <= after_seq <= MAX_SEQ:
        raise InvalidArgument(
            f"{option}={after_seq!r:.80} must be an int >= 0, at most {MAX_SEQ}: "
            "the seq of the last entry seen, or 0 for all"
        )
    return after_seq


MAX_INT_ARGUMENT = 2**31 - 1  # the columns they are compared with are PostgreSQL ints


def check_int_argument(option: str, value: object, least: int) -> int:
    """An int argument of a call (an iteration, an attempt, a version): ``InvalidArgument``
    unless it is an int from ``least`` to ``MAX_INT_ARGUMENT``."""
    if not _is_int(value) or not least <= value <= MAX_INT_ARGUMENT:
        raise InvalidArgument(
            f"{option}={value!r} must be an int >= {least}, at most {MAX_INT_ARGUMENT}"
        )
    return value


def check_flag(option: str, value: object) -> bool:
    """A switch argument: ``InvalidArgument`` unless it is True or False."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{option}={value!r} must be True or False")
    return value


def check_aware(option: str, value: object) -> datetime:
    """A point in time: ``InvalidArgument`` unless a timezone-aware ``datetime``."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidArgument(
            f"{option}={value!r} must be a timezone-aware datetime, "
            "e.g. datetime.now(UTC) + timedelta(hours=1)"
        )
    return value


def check_start_at(value: object, now: datetime) -> datetime:
    """When a run starts: a timezone-aware ``datetime`` within ``MAX_DURATION`` of
    ``now`` either way (a time in the past starts the run at once), else
    ``InvalidArgument`` (a time at the ends of the calendar is no schedule, and
    PostgreSQL would store it as an infinity)."""
    moment = check_aware("start_at", value)
    try:
        far = abs(moment - now) > MAX_DURATION
    except OverflowError:
        far = True
    if far:
        raise InvalidArgument(
            f"start_at={moment.isoformat()} is more than {MAX_DURATION.days} days from now: "
            "pass a time within that, or start the run later"
        )
    return moment


def check_limit(limit: object) -> None:
    if not _is_int(limit) or not 1 <= limit <= 1000:
        raise InvalidArgument(f"limit={limit!r} must be an int between 1 and 1000")
