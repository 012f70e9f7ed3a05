"""``ShardLease`` on a real PostgreSQL: the members of a role share its keys out as a
partition, take over the keys of a member that left or died, roles are independent,
and an outage keeps the keys only until the lease would have expired."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import create_engine
from legato.engine.loops.shard_leases import DEFAULT_SHARD_TTL, ShardLease
from legato.engine.loops.supervision import RestartPolicy
from legato.engine.repositories import notify, shard_owners
from legato.engine.transport.wakeups import Wakeups
from legato.errors import ConfigurationError
from legato.schema.shards import Shards
from tests.helpers import eventually

EIGHT = Shards(8)
SHORT = timedelta(seconds=1)
FAST = RestartPolicy(first_delay=0.05, max_delay=0.2)
REFUSED = "postgresql://postgres@127.0.0.1:1/nowhere"


def _keepers(
    engine: AsyncEngine,
    role: str,
    owners: Iterable[str],
    ttl: timedelta = DEFAULT_SHARD_TTL,
    restarts: RestartPolicy | None = None,
) -> list[ShardLease]:
    return [ShardLease(engine, role, owner, EIGHT, ttl=ttl, restarts=restarts) for owner in owners]


def _partition(keepers: Sequence[ShardLease], count: int = 8) -> bool:
    held = [k for keeper in keepers for k in keeper.held()]
    return sorted(held) == list(range(count))


def _even(keepers: Sequence[ShardLease], count: int = 8) -> bool:
    sizes = sorted(len(keeper.held()) for keeper in keepers)
    return _partition(keepers, count) and sizes[-1] - sizes[0] <= 1


async def _rows(engine: AsyncEngine, role: str) -> dict[str, frozenset[int]]:
    async with engine.begin() as conn:
        return await shard_owners.holdings(conn, role)


@asynccontextmanager
async def _running(keepers: Sequence[ShardLease]) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.create_task(keeper.run()) for keeper in keepers]
    try:
        yield tasks
    finally:
        for keeper in keepers:
            keeper.stop()
        await asyncio.gather(*tasks)


async def test_a_lone_keeper_holds_every_key_and_says_so(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="legato")
    changes: list[Sequence[int]] = []
    keeper = ShardLease(engine, "decider", "d-1", EIGHT, on_change=changes.append)
    assert keeper.held() == ()
    outcome = await keeper.start_round()
    assert outcome.shards == frozenset(range(8)) and outcome.settled
    assert keeper.held() == tuple(range(8))
    assert await _rows(engine, "decider") == {"d-1": frozenset(range(8))}
    assert "decider d-1 now holds shards 0-7 (of 8)" in caplog.messages
    await keeper.start_round()  # a renewal changes nothing and says nothing
    assert caplog.messages.count("decider d-1 now holds shards 0-7 (of 8)") == 1
    assert changes == [tuple(range(8))]
    await keeper.on_stop()
    assert changes == [tuple(range(8)), ()]
    assert await _rows(engine, "decider") == {}


@pytest.mark.parametrize(
    ("role", "owner", "ttl"),
    [("", "o", DEFAULT_SHARD_TTL), ("r", "", DEFAULT_SHARD_TTL), ("r", "o", timedelta(0))],
)
def test_a_lease_is_checked_when_it_is_made(
    engine: AsyncEngine, role: str, owner: str, ttl: timedelta
) -> None:
    with pytest.raises(ConfigurationError, match="ShardLease"):
        ShardLease(engine, role, owner, EIGHT, ttl=ttl)


async def test_three_keepers_converge_to_a_partition_and_a_graceful_stop_hands_over(
    engine: AsyncEngine,
) -> None:
    a, b, c = keepers = _keepers(engine, "decider", ["a", "b", "c"])
    for keeper in [*keepers, *keepers]:  # two passes, in any order, settle it
        await keeper.start_round()
    assert _partition(keepers)
    assert [len(k.held()) for k in keepers] == [3, 3, 2]
    rows = await _rows(engine, "decider")
    assert {owner: tuple(sorted(keys)) for owner, keys in rows.items()} == {
        k.owner: tuple(k.held()) for k in keepers
    }

    await b.on_stop()  # a graceful stop deletes the row
    assert b.held() == ()
    assert set(await _rows(engine, "decider")) == {"a", "c"}
    for keeper in (c, a):  # one round each
        await keeper.start_round()
    assert _partition([a, c]) and [len(a.held()), len(c.held())] == [4, 4]


async def test_running_keepers_share_out_the_keys_and_take_over_from_one_that_stops(
    engine: AsyncEngine,
) -> None:
    keepers = _keepers(engine, "timer", ["t-1", "t-2", "t-3"], ttl=SHORT, restarts=FAST)
    async with _running(keepers):
        await eventually(lambda: _even(keepers), "an even partition of 8 keys among 3")
        keepers[0].stop()
        await eventually(lambda: _even(keepers[1:]), "the 2 others holding all 8 keys")
        assert keepers[0].held() == ()
    assert await _rows(engine, "timer") == {}


async def test_the_keys_of_a_member_that_died_are_taken_over_once_its_row_expires(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    dead, *alive = keepers = _keepers(engine, "relay", ["r-0", "r-1", "r-2"], ttl=SHORT)
    for keeper in [*keepers, *keepers]:
        await keeper.start_round()
    assert _partition(keepers)
    lost = set(dead.held())
    # `dead` never renews again (a killed process); the others keep running.
    async with _running(alive):
        await eventually(
            lambda: _even(alive) and lost <= {k for a in alive for k in a.held()},
            "the 2 live members holding the dead one's keys too",
        )
        assert set(await _rows(engine, "relay")) == {"r-1", "r-2"}
    caplog.set_level(logging.WARNING, logger="legato")
    assert dead.held() == ()  # its own view lapsed with its lease
    assert dead.held() == ()
    lapsed = [m for m in caplog.messages if m.startswith("relay r-0 holds no shards")]
    assert len(lapsed) == 1


async def test_keepers_of_different_roles_are_independent(engine: AsyncEngine) -> None:
    decider, timer = (
        *_keepers(engine, "decider", ["p-1"]),
        *_keepers(engine, "worker:emails", ["p-1"]),
    )
    other = _keepers(engine, "worker:emails", ["p-2"])[0]
    for keeper in (decider, timer, other, timer, other):
        await keeper.start_round()
    assert decider.held() == tuple(range(8))  # alone in its role
    assert _partition([timer, other]) and len(timer.held()) == len(other.held()) == 4
    assert set(await _rows(engine, "decider")) == {"p-1"}
    assert set(await _rows(engine, "worker:emails")) == {"p-1", "p-2"}


async def test_an_outage_keeps_the_keys_until_the_lease_expires_then_none_then_resumes(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="legato")
    (keeper,) = _keepers(engine, "sweeper", ["s-1"], ttl=SHORT, restarts=FAST)
    await keeper.start_round()
    assert keeper.held() == tuple(range(8))
    unreachable = create_engine(REFUSED, "legato")
    keeper.engine = unreachable
    try:
        async with _running([keeper]):
            await eventually(
                lambda: any(
                    m.startswith("sweeper shard lease: tick failed") for m in caplog.messages
                ),
                "a failed round",
            )
            await eventually(lambda: keeper.held() == (), "the lease to lapse")
            keeper.engine = engine
            await eventually(lambda: keeper.held() == tuple(range(8)), "the keys again")
    finally:
        await unreachable.dispose()
    lapsed = [m for m in caplog.messages if m.startswith("sweeper s-1 holds no shards")]
    assert len(lapsed) == 1
    assert "sweeper s-1 renewed its lease" in caplog.messages
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]


async def test_a_joining_member_gets_its_share_at_once_when_the_members_listen(
    engine: AsyncEngine,
) -> None:
    """With wake-ups, a round that changes the role (a member joins, gives keys up,
    takes them, leaves) wakes the other members' rounds: with a lease of a minute a
    member would otherwise wait 20 s for the holder's next round."""
    minute = timedelta(seconds=60)
    wakeups = Wakeups(engine)
    try:
        first = ShardLease(engine, "decider", "m-1", EIGHT, ttl=minute, wakeups=wakeups)
        second = ShardLease(engine, "decider", "m-2", EIGHT, ttl=minute, wakeups=wakeups)
        await first.start_round()
        assert first.held() == tuple(range(8))
        async with _running([first]):
            await eventually(
                lambda: wakeups.listens(notify.shard_owners_channel("legato")),
                "the first member to listen",
            )
            async with _running([second]):
                await eventually(
                    lambda: _even([first, second]), "the two members to split the keys", timeout=10
                )
                second.stop()
            await eventually(
                lambda: first.held() == tuple(range(8)),
                "the remaining member to take the leaver's keys",
                timeout=10,
            )
    finally:
        await wakeups.close()


class _CountedLease(ShardLease):
    """A lease that counts its rounds."""

    rounds = 0

    async def start_round(self) -> shard_owners.Round:
        self.rounds += 1
        return await super().start_round()


async def test_a_member_wakes_for_its_own_roles_announcements_only(
    engine: AsyncEngine,
) -> None:
    """Every role of every process announces on one channel: a round of another role,
    or the member's own, does not run a round (a transaction) of this one; another
    member of its role does."""
    minute = timedelta(seconds=60)
    wakeups = Wakeups(engine)
    try:
        decider = _CountedLease(engine, "decider", "m-1", EIGHT, ttl=minute, wakeups=wakeups)
        await decider.start_round()
        async with _running([decider]):
            await eventually(
                lambda: wakeups.listens(notify.shard_owners_channel("legato")),
                "the member to listen",
            )
            rounds = decider.rounds  # the loop's first round waits a renewal interval
            for n in range(3):
                timer = ShardLease(engine, "timer", f"t-{n}", EIGHT, ttl=minute)
                await timer.start_round()  # a joining member of another role announces
                await timer.on_stop()  # and announces again as it leaves
            # A member of its role joins: heard after the other role's announcements
            # (one listen connection delivers in commit order).
            joiner = ShardLease(engine, "decider", "m-2", EIGHT, ttl=minute)
            await joiner.start_round()
            await eventually(lambda: decider.rounds > rounds, "the decider's round")
            await eventually(lambda: len(decider.held()) == 4, "the decider to give up half")
            # The joiner's round, then the decider's own announcement of its new keys:
            # one round for the joiner, none for its own.
            assert decider.rounds == rounds + 1, (decider.rounds, rounds)
            await joiner.on_stop()
    finally:
        await wakeups.close()
