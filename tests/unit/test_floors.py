"""Where takes and claims start their index range (legato.engine.floors): pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from legato.engine.floors import Floors, taken_floor


def test_a_scopes_floor_lapses_after_a_poll_interval_without_a_look_from_the_oldest_row() -> None:
    floors: Floors[int] = Floors()
    oldest = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert floors.since(3, now=100.0, poll_interval=5.0) is None  # never looked
    floors.look(3, None, oldest, now=100.0)
    assert floors.since(3, now=104.0, poll_interval=5.0) == taken_floor(oldest)
    assert floors.since(5, now=104.0, poll_interval=5.0) is None  # another scope
    floors.look(3, taken_floor(oldest), oldest + timedelta(seconds=30), now=104.0)
    assert floors.since(3, now=104.5, poll_interval=5.0) == taken_floor(
        oldest + timedelta(seconds=30)
    )
    assert floors.since(3, now=105.0, poll_interval=5.0) is None  # five seconds on


def test_a_take_that_says_nothing_of_what_it_left_keeps_the_floor() -> None:
    floors: Floors[tuple[str, tuple[int, ...]]] = Floors()
    scope = ("default", (0, 1))
    oldest = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    floors.look(scope, None, oldest, now=100.0)
    floors.look(scope, taken_floor(oldest), None, now=100.5)
    assert floors.since(scope, now=100.6, poll_interval=1.0) == taken_floor(oldest)
    assert floors.since(("default", (0,)), now=100.6, poll_interval=1.0) is None


def test_the_floor_is_a_second_before_the_oldest_row_taken() -> None:
    oldest = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert taken_floor(oldest) == oldest - timedelta(seconds=1)


def test_a_slow_look_from_the_oldest_row_puts_the_next_one_off_by_fifty_times_its_excess() -> None:
    """The looks from the oldest row walk what a held snapshot keeps: once they get slow,
    they are spaced so that they take about a fiftieth of the loop's time, a minute at
    most; a cheap one (no snapshot held) is repeated every poll interval."""
    floors: Floors[int] = Floors()
    oldest = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    floors.look(3, None, oldest, now=100.0, took=0.005)
    assert floors.since(3, now=101.0, poll_interval=1.0) is None
    floors.look(3, None, oldest, now=101.0, took=0.51)  # 0.5 s over the cheap 10 ms
    assert floors.since(3, now=126.9, poll_interval=1.0) == taken_floor(oldest)
    assert floors.since(3, now=127.0, poll_interval=1.0) is None  # 1 s + 25 s on
    floors.look(3, None, oldest, now=200.0, took=30.0)
    assert floors.since(3, now=260.9, poll_interval=1.0) == taken_floor(oldest)
    assert floors.since(3, now=261.0, poll_interval=1.0) is None  # at most a minute more
