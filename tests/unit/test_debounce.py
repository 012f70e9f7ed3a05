"""The Debounce option's checks and its start rule (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from legato import Debounce, InvalidArgument

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_each_call_pushes_the_start_back_by_the_window() -> None:
    debounce = Debounce(key="cart:1", window=timedelta(seconds=30))
    assert debounce.starts_at(T0, T0) == T0 + timedelta(seconds=30)
    later = T0 + timedelta(minutes=10)
    assert debounce.starts_at(later, T0) == later + timedelta(seconds=30)


def test_max_wait_caps_the_start_from_the_windows_first_call() -> None:
    debounce = Debounce(key="k", window=timedelta(seconds=30), max_wait=timedelta(minutes=1))
    assert debounce.starts_at(T0 + timedelta(seconds=10), T0) == T0 + timedelta(seconds=40)
    assert debounce.starts_at(T0 + timedelta(seconds=50), T0) == T0 + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key": "", "window": timedelta(seconds=1)}, "idempotency key '' is empty"),
        ({"key": 7, "window": timedelta(seconds=1)}, "must be a string"),
        ({"key": "k", "window": timedelta(0)}, "window=datetime.timedelta(0) must be"),
        ({"key": "k", "window": 5}, "window=5 must be a timedelta"),
        ({"key": "k", "window": timedelta(days=32)}, "at most 31 days"),
        ({"key": "k", "window": timedelta(seconds=-1)}, "must be a timedelta above zero"),
        ({"key": "k", "window": timedelta.max}, "at most 31 days"),
        ({"key": "k", "window": float("nan")}, "window=nan must be a timedelta"),
        ({"key": "k", "window": None}, "window=None must be a timedelta"),
        ({"key": "k" * 600, "window": timedelta(seconds=1)}, "is 600 bytes"),
        ({"key": "a\x00b", "window": timedelta(seconds=1)}, "the unprintable character U.0000"),
        ({"key": None, "window": timedelta(seconds=1)}, "None must be a string"),
        ({"key": "k", "window": timedelta(seconds=1), "max_wait": 5}, "max_wait=5 must be"),
        (
            {"key": "k", "window": timedelta(seconds=10), "max_wait": timedelta(seconds=5)},
            "max_wait=datetime.timedelta(seconds=5) is shorter than window",
        ),
    ],
)
def test_a_bad_debounce_is_refused_naming_the_value(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        Debounce(**arguments)  # type: ignore[arg-type]
