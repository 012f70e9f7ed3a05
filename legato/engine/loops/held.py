"""Which shard keys a loop takes work from: all of them, or those its lease holds.

A loop asks ``held()`` before each round of takes; what it returns may change between
calls (a lease gained or given up). Holding a key routes work to this loop, it does not
guard it: the queues' row locks keep two loops that both believe they hold a key from
doing the same work twice, so a stale answer costs an empty take, never a double.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from legato.schema.shards import Shards


class HeldShards(Protocol):
    """The keys a loop currently holds, in ascending order."""

    def held(self) -> Sequence[int]: ...


class AllShards:
    """Every key: a lone process, ``legato dev``, and the tests' in-process runtimes."""

    def __init__(self, shards: Shards) -> None:
        self._all = tuple(shards.all())

    def held(self) -> Sequence[int]:
        return self._all
