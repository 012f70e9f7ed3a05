"""``Debounce``: the start option whose last call within a window wins.

``Client.start(workflow, input, debounce=Debounce(key="cart:42", window=timedelta(seconds=30)))``
opens a window for (workflow, key) on its first call: the run is created at once, but
its first decision waits until ``window`` after the latest call. Each further call
while the run is still pending replaces its input and pushes its start back (never
past ``max_wait`` after the window's first call), and gets the same run's handle; a
call after the run has started opens a new window with a new run. The transaction
logic is ``legato.engine.debounced_start``; this module is the value and its pure rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from legato.errors import InvalidArgument
from legato.limits import check_idempotency_key

# A window longer than this is a schedule, not a debounce.
MAX_WINDOW = timedelta(days=31)


@dataclass(frozen=True)
class Debounce:
    """Debounce starts of one workflow by ``key``: within ``window`` of the latest call
    only the last call's input runs. ``max_wait`` (at least ``window``) bounds how long
    a stream of calls can hold the run back, counted from the window's first call; None
    lets every call push the start back by ``window``.

    ``key`` follows the idempotency key rules (a non-empty printable string of at most
    512 bytes); it also picks the run's shard key unless the start gives ``shard_key``.
    """

    key: str
    window: timedelta
    max_wait: timedelta | None = None

    def __post_init__(self) -> None:
        check_idempotency_key(self.key, InvalidArgument)
        _check_span("window", self.window)
        if self.max_wait is not None:
            _check_span("max_wait", self.max_wait)
            if self.max_wait < self.window:
                raise InvalidArgument(
                    f"Debounce max_wait={self.max_wait!r} is shorter than "
                    f"window={self.window!r}: give a max_wait of at least the window, or None"
                )

    def starts_at(self, now: datetime, first_at: datetime) -> datetime:
        """When a call at ``now`` makes the pending run start, in a window whose first
        call was at ``first_at``: ``window`` after ``now``, capped by ``max_wait``; pure."""
        due = now + self.window
        if self.max_wait is None:
            return due
        return min(due, first_at + self.max_wait)


def _check_span(option: str, value: object) -> None:
    if not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_WINDOW:
        raise InvalidArgument(
            f"Debounce {option}={value!r} must be a timedelta above zero and at most "
            f"{MAX_WINDOW.days} days, e.g. timedelta(seconds=30)"
        )
