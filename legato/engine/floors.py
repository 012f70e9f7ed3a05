"""Where a decider's take or a worker's claim starts its index range (pure state; the
caller passes the clock). docs/design.md, "The decider's floor" and "The worker's
floor".

A queue's takes return its oldest rows, so once one returned rows from ``oldest`` on,
below ``oldest`` there is nothing for the next one but rows other sessions hold, rows
not yet committed, and the dead rows a held snapshot keeps from vacuum. Those dead rows'
index entries are not marked dead while the snapshot is held, so a take from the oldest
row visits every one of them. A take from the floor skips them on the index alone.
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime, timedelta
from typing import Generic, TypeVar

# How far before the oldest row a take returned the next take looks: rows stamped by a
# sender whose clock is a little behind, or by a transaction that began a little earlier.
FLOOR_SLACK = timedelta(seconds=1)

Scope = TypeVar("Scope", bound=Hashable)


def taken_floor(oldest: datetime) -> datetime:
    """Where later takes may start once a take returned rows due from ``oldest`` on
    (a bitmap of 200,000 dead rows below it costs 7 ms a take, against 0.07 ms from the
    floor). A row stamped long before its commit (a start in a long transaction, a
    claim's lease given back) is taken by the next take from the oldest row, at least
    once per poll interval. A row stamped ``-infinity`` (written by SQL of one's own;
    the driver reads it as the first moment of year 1) is its own floor."""
    try:
        return oldest - FLOOR_SLACK
    except OverflowError:
        return oldest


class Floors(Generic[Scope]):
    """Where takes start, per scope (a shard key, a queue and its keys, ...). A scope's
    floor is ``taken_floor`` of the oldest row its last informative take returned; a
    scope whose takes have not looked from the oldest row for a poll interval gets no
    floor, so its next take does."""

    def __init__(self) -> None:
        self._floors: dict[Scope, datetime] = {}
        self._looked_from_oldest_at: dict[Scope, float] = {}

    def since(self, scope: Scope, now: float, poll_interval: float) -> datetime | None:
        """Where the scope's next take starts (None: from the oldest row)."""
        last = self._looked_from_oldest_at.get(scope)
        if last is None or now - last >= poll_interval:
            return None
        return self._floors.get(scope)

    def look(
        self, scope: Scope, since: datetime | None, oldest: datetime | None, now: float
    ) -> None:
        """Record a take of the scope that started at ``since`` and returned rows due from
        ``oldest`` on (None: it returned none, or what it returned says nothing of the
        rows it left; the floor stays)."""
        if since is None:
            self._looked_from_oldest_at[scope] = now
        if oldest is not None:
            self._floors[scope] = taken_floor(oldest)
