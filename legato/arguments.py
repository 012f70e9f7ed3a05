"""The checks of ``Client``'s arguments: each raises the typed error that names the bad
value and what to pass instead, before anything is written."""

from __future__ import annotations

import math
import uuid

from legato.errors import ConfigurationError, InvalidArgument, InvalidRunId
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
    # `not timeout >= 0` also refuses NaN.
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout >= 0:
        raise InvalidArgument(
            f"timeout {timeout!r} must be a number of seconds >= 0, or None to wait forever"
        )
    return float(timeout)


def check_max_payload(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"max_payload_bytes={value!r} must be a positive int of bytes")


def run_status(value: object) -> RunStatus:
    if isinstance(value, str) and value in RunStatus.__members__.values():
        return RunStatus(value)
    known = ", ".join(s.value for s in RunStatus)
    raise InvalidArgument(f"status={value!r} is not a run status ({known})")


def check_after_seq(after_seq: object) -> int:
    if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
        raise InvalidArgument(f"after_seq={after_seq!r} must be an int >= 0")
    return after_seq


def check_poll_interval(value: object) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise ConfigurationError(f"poll_interval={value!r} must be a positive number of seconds")


def check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise InvalidArgument(f"limit={limit!r} must be an int between 1 and 1000")
