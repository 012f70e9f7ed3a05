"""Sharing a role's shard keys out among its members, one member's round at a time.

A role ("decider", "timer", "sweeper", "relay", "worker:<queues>#<task digest>") has one member per
live loop: a row of ``shard_owners`` naming the keys it holds. There is no leader: each
member, in turn and under a lock on its role (``legato.engine.repositories.shard_owners``),
reads every member's keys and rewrites only its own with ``rebalance``:

* its quota is ``count // M`` keys of ``M`` members, one more for each of the first
  ``count % M`` members in sorted order (the quotas add up to ``count``);
* it keeps the keys it holds that no other member holds, up to its quota, giving up
  its highest keys first;
* it takes free keys (held by nobody), lowest first, up to its quota.

A member only takes free keys, so two members never come to hold one key. A key it
gives up is free until the next round of a member under its quota, and while a key is
free some member is under its quota (the quotas add up to ``count``), so no key stays
lost. Once the members stop changing, everyone is within its quota after each member's
next round, and exactly at it after each member's second: a partition of all keys.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def quota(count: int, me: str, members: Iterable[str]) -> int:
    """How many of ``count`` keys ``me`` should hold among ``members`` (``me`` is
    counted whether or not it is listed)."""
    ranked = sorted(set(members) | {me})
    base, extra = divmod(count, len(ranked))
    return base + (1 if ranked.index(me) < extra else 0)


def rebalance(count: int, me: str, holdings: Mapping[str, frozenset[int]]) -> frozenset[int]:
    """The keys ``me`` holds after its round, given what every member holds now
    (``holdings``, ``me`` included or not: a member that is not listed holds nothing).

    Keys outside ``range(count)`` are never kept or counted (a smaller count)."""
    keys = range(count)
    mine = holdings.get(me, frozenset())
    others: set[int] = set()
    for owner, held in holdings.items():
        if owner != me:
            others |= held
    share = quota(count, me, holdings)
    kept = sorted(k for k in mine if k in keys and k not in others)[:share]
    free = (k for k in keys if k not in others and k not in mine)
    taken: list[int] = []
    for key in free:
        if len(kept) + len(taken) >= share:
            break
        taken.append(key)
    return frozenset(kept) | frozenset(taken)


def describe(keys: Iterable[int]) -> str:
    """Keys as ranges, for the log: ``0-3,8`` (``none`` when empty)."""
    ordered = sorted(set(keys))
    if not ordered:
        return "none"
    runs: list[str] = []
    start = previous = ordered[0]
    for key in [*ordered[1:], None]:
        if key is not None and key == previous + 1:
            previous = key
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if key is not None:
            start = previous = key
    return ",".join(runs)
