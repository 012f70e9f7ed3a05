"""The shard lease keeper: which of the shard keys one loop takes work from.

Every loop of a role ("decider", "timer", "sweeper", "relay", "worker:<queues>#<task digest>") that
takes per key has a ``ShardLease``: a member of the role with a row in
``shard_owners``. Every third of its time to live it runs a round
(``legato.engine.repositories.shard_owners.rebalance_round``): renew the row, drop
the rows of members whose lease expired, and rewrite its own keys with
``legato.engine.shard_share.rebalance``. There is no leader and no other membership
service: the rows are the membership, and the keys end up shared out evenly.

A round that changed its keys (or a member's first) NOTIFYs the shard owners channel
when the role has other members, naming its role and itself; a member runs a round on
another member of its role's notification only (every role of every process shares the
channel, and a lone member has no one to tell).

While it is under its quota (a member joined or left and keys are changing hands) it
runs its rounds fifteen times per time to live instead of three, so a key given up by
another member is taken within a fraction of a second, not a third of the lease.

A database outage keeps the last keys until the lease would have expired (counted
from the start of the last round that committed, so never after the row's own
expiry), then holds none, with one warning, until a round succeeds again. Stopping
deletes the row, so the other members take its keys at their next round.

A lease routes work, it does not guard it (``legato.engine.loops.held``): the queues'
row locks keep two loops that both believe they hold a key from doing one piece of work
twice, so a late view of the keys costs an empty take, never a double.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.arguments import check_positive_seconds
from legato.db.schema_names import engine_schema
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import notify, shard_owners
from legato.engine.shard_share import describe
from legato.engine.transport.wakeups import Wakeups, payloads
from legato.errors import ConfigurationError
from legato.outages import database_failure, is_database_error
from legato.schema.shards import Shards

log = logging.getLogger("legato")

DEFAULT_SHARD_TTL = timedelta(seconds=15)
# Rounds per time to live: settled, and while keys are changing hands.
_RENEWALS_PER_TTL = 3
_SETTLING_ROUNDS_PER_TTL = 15


def announcement(role: str, owner: str) -> str:
    """The payload of a member's NOTIFY on the shard owners channel (pure)."""
    return f"{role}\n{owner}"


def announced_by(payload: str) -> tuple[str, str]:
    """The (role, owner) an announcement names (pure); a payload without an owner (a
    hand-sent NOTIFY) names its whole text as the role and no owner."""
    role, _, owner = payload.rpartition("\n")
    return (role, owner) if role else (payload, "")


class ShardLease(Loop):
    """The keys one loop of ``role`` holds: a ``HeldShards`` whose rounds run as a
    supervised loop (``run``); ``start_round`` runs one now (before the loop it serves
    starts taking).

    ``on_change`` is called with the new keys whenever they change (to nudge the loop
    that takes from them)."""

    def __init__(
        self,
        engine: AsyncEngine,
        role: str,
        owner: str,
        shards: Shards,
        *,
        ttl: timedelta = DEFAULT_SHARD_TTL,
        on_change: Callable[[Sequence[int]], None] | None = None,
        restarts: RestartPolicy | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        for option, value in (("role", role), ("owner", owner)):
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"ShardLease({option}={value!r}) must be a non-empty str")
        if not isinstance(ttl, timedelta):
            raise ConfigurationError(f"ShardLease(ttl={ttl!r}) must be a timedelta")
        seconds = check_positive_seconds("ShardLease(ttl)", ttl.total_seconds())
        # With ``wakeups``, a round that changed the role wakes its other members' rounds
        # (a joining process gets its share in milliseconds, not a third of a lease).
        # No channel for the base loop: this lease subscribes itself, for the payload.
        self._announce = notify.shard_owners_channel(engine_schema(engine, "ShardLease"))
        super().__init__(
            poll_interval=seconds / _RENEWALS_PER_TTL,
            wakeups=wakeups,
            channel=None,
            restarts=restarts,
        )
        self.name = f"{role} shard lease"
        self.engine = engine
        self.role = role
        self.owner = owner
        self.shards = shards
        self.ttl = ttl
        self._on_change = on_change
        self._held: tuple[int, ...] = ()
        self._deadline = 0.0  # time.monotonic() after which the keys are no longer held
        self._expired_warned = False
        self._round_lock = asyncio.Lock()
        self._joined = False  # its first round announces it
        self._round_due = True  # the next tick runs a round (see ``run``)

    async def run(self) -> None:
        """Listen for the announcements of the role's other members, then run the rounds."""
        # After ``start_round`` (the runtime's, before its loops take) the loop's first
        # round waits a renewal interval, as every later one does: run at once it would
        # be a second transaction per lease at every start, renewing what was just taken.
        self._round_due = not self._joined
        async with payloads(self._wakeups, self._announce, self._on_announcement):
            await super().run()

    def _on_announcement(self, payload: str) -> None:
        """Another member of this role changed its keys, joined or left: run a round now.
        Every role of every process shares the channel, so a round for each would be a
        transaction per lease per announcement (and, on an idle connection, a commit per
        NOTIFY delivery): only this role's, and not this member's own, wake it."""
        role, owner = announced_by(payload)
        if role == self.role and owner != self.owner:
            self._round_due = True
            self.nudge()

    def held(self) -> Sequence[int]:
        """The keys held now, ascending; none once the lease could not be renewed in time."""
        if self._held and time.monotonic() >= self._deadline:
            self._expire()
        return self._held

    async def start_round(self) -> shard_owners.Round:
        """Run one round now and hold its keys; database errors are raised."""
        async with self._round_lock:
            started = time.monotonic()
            async with self.engine.begin() as conn:
                result = await shard_owners.rebalance_round(
                    conn, self.role, self.owner, self.shards.count, self.ttl
                )
                changed = not self._joined or tuple(sorted(result.shards)) != self._held
                # A lone member (one process per role, the common case) has no one to
                # tell: every listening connection would commit once per delivery.
                if changed and len(result.members) > 1:
                    await notify.send(conn, self._announce, announcement(self.role, self.owner))
            self._joined = True
            self._deadline = started + self.ttl.total_seconds()
            if self._expired_warned:
                log.info("%s %s renewed its lease", self.role, self.owner)
                self._expired_warned = False
            self._hold(tuple(sorted(result.shards)))
            seconds = self.ttl.total_seconds()
            per_ttl = _RENEWALS_PER_TTL if result.settled else _SETTLING_ROUNDS_PER_TTL
            self.poll_interval = seconds / per_ttl
            return result

    async def tick(self) -> bool:
        """One round; a database error is retried by ``Loop`` (the keys are kept until
        the lease would have expired, see ``held``)."""
        if self._round_due:
            await self.start_round()
        self._round_due = True
        return False

    async def on_stop(self) -> None:
        """Leave the role: delete the row, so the other members take the keys at once.
        If the database is unreachable the row simply expires."""
        async with self._round_lock:
            self._hold(())
            try:
                async with self.engine.begin() as conn:
                    await shard_owners.leave(conn, self.role, self.owner)
                    await notify.send(conn, self._announce, announcement(self.role, self.owner))
            except Exception as error:
                if not is_database_error(error):
                    raise
                log.warning(
                    "%s %s could not leave (%s); its lease expires in at most %gs",
                    self.role,
                    self.owner,
                    database_failure(error),
                    self.ttl.total_seconds(),
                )

    def _expire(self) -> None:
        if not self._expired_warned:
            log.warning(
                "%s %s holds no shards: its lease could not be renewed within %gs; "
                "it takes keys again after its next round",
                self.role,
                self.owner,
                self.ttl.total_seconds(),
            )
            self._expired_warned = True
        self._hold(())

    def _hold(self, keys: tuple[int, ...]) -> None:
        if keys == self._held:
            return
        self._held = keys
        log.info(
            "%s %s now holds shards %s (of %d)",
            self.role,
            self.owner,
            describe(keys),
            self.shards.count,
        )
        if self._on_change is not None:
            self._on_change(keys)
