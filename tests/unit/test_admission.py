"""The pure parts of limited claims: admitting candidates, refilling token buckets."""

from __future__ import annotations

from datetime import timedelta

import pytest

from legato import Cache, Concurrency, RateLimit, TaskDefinitionError, task
from legato.context import TaskContext
from legato.engine.admission import Needs, admit, refill

SECOND = timedelta(seconds=1)


def needs(*slots: str, tokens: tuple[str, ...] = ()) -> Needs:
    return Needs(
        slots={("k", s): 1 for s in slots}, tokens={("r", t): (10, SECOND) for t in tokens}
    )


def test_a_full_key_waits_without_blocking_other_keys_behind_it() -> None:
    order = [needs("ann"), needs("ann"), needs("bob"), needs()]
    admitted, _ = admit(order, {("k", "ann"): [0], ("k", "bob"): [0]}, {}, want=10)
    assert [(i, slots) for i, slots in admitted] == [
        (0, [("k", "ann", 0)]),
        (2, [("k", "bob", 0)]),
        (3, []),
    ]


def test_admission_stops_at_want_and_keeps_priority_order() -> None:
    admitted, _ = admit([needs(), needs(), needs()], {}, {}, want=2)
    assert [i for i, _ in admitted] == [0, 1]


def test_a_candidate_needs_every_slot_and_token_or_takes_none() -> None:
    both = Needs(slots={("q", ""): 3, ("k", "ann"): 1}, tokens={})
    admitted, _ = admit([both], {("q", ""): [0, 1]}, {}, want=5)
    assert admitted == []  # no free "ann" slot: the queue slot is not taken either


def test_tokens_are_spent_one_per_admitted_attempt() -> None:
    order = [needs(tokens=("x",)) for _ in range(5)]
    admitted, left = admit(order, {}, {("r", "x"): 3.5}, want=10)
    assert [i for i, _ in admitted] == [0, 1, 2]
    assert left[("r", "x")] == pytest.approx(0.5)


def test_a_bucket_another_claim_holds_admits_nothing() -> None:
    admitted, _ = admit([needs(tokens=("x",)), needs()], {}, {}, want=10)
    assert [i for i, _ in admitted] == [1]


def test_refill_adds_count_per_period_up_to_the_burst() -> None:
    assert refill(0.0, timedelta(milliseconds=250), 10, SECOND) == pytest.approx(2.5)
    assert refill(4.0, timedelta(hours=1), 10, SECOND) == 10.0
    assert refill(1.0, -SECOND, 10, SECOND) == 1.0  # a clock behind adds nothing


def test_limit_keys_come_from_the_inputs() -> None:
    @task(concurrency=Concurrency(1, key=lambda customer, amount: customer))
    async def charge(ctx: TaskContext, customer: str, amount: int) -> None:
        return None

    assert charge.key_of(charge.concurrency.key if charge.concurrency else None, ["c1", 5]) == "c1"
    # Inputs that do not parse share one key rather than escape the limit.
    assert charge.key_of(charge.concurrency.key if charge.concurrency else None, ["c1"]) == ""


def test_cache_keys_are_equal_for_equal_inputs() -> None:
    @task(cache=Cache(expires=timedelta(minutes=5)))
    async def lookup(ctx: TaskContext, query: dict[str, int]) -> int:
        return 0

    assert lookup.cache_key([{"a": 1, "b": 2}]) == lookup.cache_key([{"b": 2, "a": 1}])
    assert lookup.cache_key([{"a": 1}]) != lookup.cache_key([{"a": 2}])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Concurrency(0), "limit must be an int from 1 to 10000"),
        (lambda: RateLimit(10, per=timedelta(0)), "per must be a positive"),
        (lambda: RateLimit(0, per=SECOND), "count must be an int >= 1"),
        (lambda: Cache(expires=timedelta(0)), "expires must be a positive"),
        (lambda: Concurrency(1, key="customer"), "key must be a function"),  # type: ignore[arg-type]
    ],
)
def test_bad_limit_options_are_typed_errors_naming_the_value(make: object, message: str) -> None:
    with pytest.raises(TaskDefinitionError, match=message):
        make()  # type: ignore[operator]
