"""``legato.engine.shard_share``: members' rounds, in any order, converge to a partition of
every key at the quotas, never lose a key, and take over the keys of a member that left."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from legato.engine.shard_share import describe, quota, rebalance

Holdings = dict[str, frozenset[int]]

NAMES = [f"m{i}" for i in range(6)]


def _round(count: int, holdings: Holdings, me: str) -> None:
    holdings[me] = rebalance(count, me, holdings)


def _disjoint(holdings: Holdings) -> bool:
    held = [k for keys in holdings.values() for k in keys]
    return len(held) == len(set(held))


def _settled(count: int, holdings: Holdings) -> bool:
    """A partition of every key in which each member holds exactly its quota."""
    every = set().union(*holdings.values()) if holdings else set()
    return (
        _disjoint(holdings)
        and every == set(range(count))
        and all(len(keys) == quota(count, m, holdings) for m, keys in holdings.items())
    )


@st.composite
def _states(draw: st.DrawFn, overlapping: bool = True) -> tuple[int, Holdings]:
    """A key count and any holdings of 1 to 6 members (overlapping, out of range or not)."""
    count = draw(st.integers(1, 20))
    members = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    keys = st.frozensets(st.integers(0, count + 2), max_size=count + 3)
    holdings = {m: draw(keys) for m in members}
    if not overlapping:
        seen: set[int] = set()
        for m in members:
            holdings[m] = frozenset(k for k in holdings[m] if k < count) - seen
            seen |= holdings[m]
    return count, holdings


def _passes(data: st.DataObject, members: Sequence[str], passes: int) -> list[str]:
    """An order of rounds in which every member has its turn ``passes`` times, the
    others interleaved at random (a member may have many rounds within one pass)."""
    order: list[str] = []
    for _ in range(passes):
        extra = data.draw(st.lists(st.sampled_from(list(members)), max_size=8))
        turn = list(members)
        order.extend(data.draw(st.permutations([*extra, *turn])))
    return order


@given(st.data())
def test_rounds_in_any_order_converge_within_two_passes(data: st.DataObject) -> None:
    count, holdings = data.draw(_states())
    for me in _passes(data, sorted(holdings), passes=2):
        _round(count, holdings, me)
    assert _settled(count, holdings), holdings
    # settled is a fixed point: further rounds change nothing
    for me in data.draw(st.lists(st.sampled_from(sorted(holdings)), max_size=10)):
        before = dict(holdings)
        _round(count, holdings, me)
        assert holdings == before


@given(st.data())
def test_after_one_pass_holdings_are_disjoint_and_within_quota(data: st.DataObject) -> None:
    count, holdings = data.draw(_states())
    for me in _passes(data, sorted(holdings), passes=1):
        _round(count, holdings, me)
    assert _disjoint(holdings)
    assert all(len(keys) <= quota(count, m, holdings) for m, keys in holdings.items())


@given(st.data())
def test_no_key_is_ever_lost(data: st.DataObject) -> None:
    """From disjoint holdings, a round never makes two members hold one key, and while
    a key is free some member's next round takes one."""
    count, holdings = data.draw(_states(overlapping=False))
    for me in data.draw(st.lists(st.sampled_from(sorted(holdings)), max_size=30)):
        _round(count, holdings, me)
        assert _disjoint(holdings)
        free = set(range(count)) - set().union(*holdings.values())
        if free:
            takers = [m for m in holdings if rebalance(count, m, holdings) & free]
            assert takers, (holdings, free)


@given(st.integers(1, 40), st.frozensets(st.integers(0, 50)))
def test_a_lone_member_holds_every_key(count: int, held: frozenset[int]) -> None:
    assert rebalance(count, "me", {"me": held}) == frozenset(range(count))
    assert rebalance(count, "me", {}) == frozenset(range(count))


@given(st.data())
def test_the_keys_of_a_member_that_left_are_taken_over_in_one_pass(data: st.DataObject) -> None:
    count, holdings = data.draw(_states())
    if len(holdings) < 2:
        holdings["m5" if "m5" not in holdings else "m4"] = frozenset()
    for me in _passes(data, sorted(holdings), passes=2):
        _round(count, holdings, me)
    gone = data.draw(st.sampled_from(sorted(holdings)))
    del holdings[gone]  # a graceful leave, or its row expired and was deleted
    for me in data.draw(st.permutations(sorted(holdings))):
        _round(count, holdings, me)
    assert _settled(count, holdings), holdings


@given(st.data())
def test_a_member_that_joins_gets_its_quota_within_two_passes(data: st.DataObject) -> None:
    count, holdings = data.draw(_states())
    for me in _passes(data, sorted(holdings), passes=2):
        _round(count, holdings, me)
    newcomer = data.draw(st.sampled_from([n for n in NAMES if n not in holdings] or ["m9"]))
    holdings[newcomer] = frozenset()
    for me in _passes(data, sorted(holdings), passes=2):
        _round(count, holdings, me)
    assert _settled(count, holdings), holdings


def test_only_the_excess_moves_when_a_member_joins() -> None:
    """The others give up their highest keys; the newcomer takes exactly those."""
    holdings: Holdings = {"a": frozenset(range(4)), "b": frozenset(range(4, 8))}
    holdings["c"] = frozenset()
    for me in ["a", "b", "c"]:
        _round(8, holdings, me)
    assert holdings == {"a": {0, 1, 2}, "b": {4, 5, 6}, "c": {3, 7}}


def test_quotas_add_up_and_the_first_members_get_the_remainder() -> None:
    for count in range(1, 30):
        for size in range(1, 8):
            members = [f"m{i}" for i in range(size)]
            quotas = [quota(count, m, members) for m in members]
            assert sum(quotas) == count
            assert quotas == sorted(quotas, reverse=True)
            assert max(quotas) - min(quotas) <= 1
    assert quota(8, "new", ["a", "b"]) == 2  # counted though not listed


def test_describe_shows_ranges() -> None:
    assert describe([]) == "none"
    assert describe([8, 0, 1, 2, 3]) == "0-3,8"
    assert describe([1, 3, 5]) == "1,3,5"
    assert describe(range(16)) == "0-15"
