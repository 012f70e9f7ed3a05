"""``shard_owners``: which loop of a role holds which shard keys, under expiring rows.

A row is a live member of its role; ``ShardLease`` (``legato.engine.loops.shard_leases``)
renews it every third of its time to live and rewrites its keys with
``legato.engine.shard_share.rebalance``. Every statement here is served by the primary
key ``(role, owner)``: a role's rows are one range of it. The table is small (one row
per loop of each process) and rounds are rare (seconds apart per loop), so none of this
is on a hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.notify import schema_of
from legato.engine.shard_share import quota, rebalance
from legato.schema import ShardOwners


@dataclass(frozen=True)
class Round:
    """What one member's round left: its keys, its quota and the role's members."""

    shards: frozenset[int]
    quota: int
    members: tuple[str, ...]

    @property
    def settled(self) -> bool:
        """The member holds its quota (it wants no more keys than it has)."""
        return len(self.shards) >= self.quota


async def rebalance_round(
    conn: AsyncConnection, role: str, owner: str, count: int, ttl: timedelta
) -> Round:
    """One round of ``owner`` in ``role`` (``ShardLease``), in the caller's transaction,
    which must commit it at once: lock the role, delete the rows of members whose lease
    expired (their keys are free from now), renew ``owner``'s row until ``now() + ttl``
    (a new member starts with no keys: it only takes free ones), read every member's
    keys and write ``owner``'s new share of the ``count`` keys.

    The lock is a transaction-scoped advisory lock per schema and role: rounds of one
    role run one at a time (so two members never take one free key, and a new member's
    row is seen by the next round), rounds of different roles do not wait for each
    other, and it is released by the commit, behind a transaction pooler too. Primary
    key (every statement reads or writes one role's range of it).
    """
    lock_key = f"legato-shard-owners:{schema_of(conn)}:{role}"
    await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(lock_key))))
    # Another member's row that expired is a dead member; this owner's own expired row
    # is kept: nobody took its keys (they would have deleted it first).
    await conn.execute(
        delete(ShardOwners.table).where(
            ShardOwners.role == role,
            ShardOwners.owner != owner,
            ShardOwners.expires_at < func.now(),
        )
    )
    renew = insert(ShardOwners.table).values(
        role=role, owner=owner, shards=[], expires_at=func.now() + ttl
    )
    await conn.execute(
        renew.on_conflict_do_update(
            index_elements=[ShardOwners.role, ShardOwners.owner],
            set_={"expires_at": renew.excluded.expires_at},
        )
    )
    rows = await conn.execute(
        select(ShardOwners.owner, ShardOwners.shards).where(ShardOwners.role == role)
    )
    holdings = {member: frozenset(keys) for member, keys in rows.all()}
    share = rebalance(count, owner, holdings)
    if share != holdings.get(owner):
        await conn.execute(
            update(ShardOwners.table)
            .where(ShardOwners.role == role, ShardOwners.owner == owner)
            .values(shards=sorted(share))
        )
    members = tuple(sorted(holdings))
    return Round(shards=share, quota=quota(count, owner, members), members=members)


async def leave(conn: AsyncConnection, role: str, owner: str) -> None:
    """Delete ``owner``'s row of ``role`` (``ShardLease`` stopping gracefully): its keys
    are free at once, for the other members' next rounds. Primary key."""
    await conn.execute(
        delete(ShardOwners.table).where(ShardOwners.role == role, ShardOwners.owner == owner)
    )


async def holdings(conn: AsyncConnection, role: str) -> dict[str, frozenset[int]]:
    """Every member of ``role`` and its keys, expired rows included (the tests, and
    operators' tools). Primary key."""
    rows = await conn.execute(
        select(ShardOwners.owner, ShardOwners.shards).where(ShardOwners.role == role)
    )
    return {member: frozenset(keys) for member, keys in rows.all()}
