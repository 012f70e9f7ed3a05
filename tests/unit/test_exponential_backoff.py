"""The one exponential back-off, and the figures each of its callers waited before it
was shared (computed from the former copies, asserted unchanged)."""

from __future__ import annotations

import random
from datetime import timedelta

from legato.engine.decider.backoff import exponential
from legato.engine.loops import supervision
from legato.engine.loops.decider import decision_retry_delay
from legato.engine.loops.relay import retry_delay
from legato.engine.loops.supervision import RestartPolicy


def test_doubles_from_the_first_delay_up_to_the_cap() -> None:
    assert [exponential(1.0, n, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert exponential(1.0, 0, 10.0) == 1.0  # no failure yet counts as the first
    assert exponential(1.0, 3, 100.0, multiplier=3.0) == 9.0


def test_keeps_a_timedelta_exact_to_the_microsecond() -> None:
    delays = [exponential(timedelta(milliseconds=333), n, timedelta(seconds=10)) for n in (1, 3)]
    assert delays == [timedelta(microseconds=333_000), timedelta(microseconds=1_332_000)]


def test_a_huge_failure_count_gives_the_cap_not_an_overflow() -> None:
    assert exponential(0.5, 10**6, 30.0) == 30.0
    assert exponential(timedelta(seconds=2), 10**6, timedelta(minutes=5)) == timedelta(minutes=5)


def test_zero_stays_zero() -> None:
    assert exponential(0.0, 10**6, 30.0) == 0.0


def test_loop_restarts_wait_as_before() -> None:
    assert [RestartPolicy().delay(n) for n in (0, 1, 2, 3, 6, 7, 8, 40)] == [
        0.5, 0.5, 1.0, 2.0, 16.0, 30.0, 30.0, 30.0,
    ]  # fmt: skip
    policy = RestartPolicy(first_delay=0.3, max_delay=7.0)
    assert [policy.delay(n) for n in range(1, 7)] == [0.3, 0.6, 1.2, 2.4, 4.8, 7.0]


def test_failed_ticks_wait_as_before() -> None:
    waits = [
        exponential(supervision._FIRST_TICK_RETRY, n, supervision._MAX_TICK_RETRY)
        for n in range(1, 9)
    ]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_failed_decisions_wait_as_before() -> None:
    base, cap = timedelta(seconds=2), timedelta(minutes=5)
    seconds = [decision_retry_delay(n, base, cap).total_seconds() for n in (0, 1, 2, 3, 8, 9, 40)]
    assert seconds == [2, 2, 4, 8, 256, 300, 300]


def test_webhook_retries_wait_as_before() -> None:
    rng = random.Random(7)
    delays = [
        retry_delay(n, timedelta(seconds=5), timedelta(hours=1), rng) for n in (0, 1, 2, 3, 10, 40)
    ]
    assert delays == [
        timedelta(seconds=3, microseconds=309582),
        timedelta(seconds=2, microseconds=877123),
        timedelta(seconds=8, microseconds=254672),
        timedelta(seconds=10, microseconds=724363),
        timedelta(seconds=1965, microseconds=928966),
        timedelta(seconds=2458, microseconds=240050),
    ]
