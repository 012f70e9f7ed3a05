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


def test_a_row_stamped_at_the_start_of_the_calendar_is_its_own_floor() -> None:
    """``-infinity`` reads as ``datetime.min``: the floor must not overflow (it crashed
    every decider loop once such a row was taken)."""
    earliest = datetime.min.replace(tzinfo=UTC)
    assert taken_floor(earliest) == earliest
