"""``legato runs history`` lines: a completion served by the output cache says so."""

from __future__ import annotations

from datetime import UTC, datetime

from legato.cli import render
from legato.models import HistoryEvent

AT = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _completed(data: dict[str, object]) -> str:
    event = HistoryEvent(4, "task_completed", "square", 0, 1, data, AT)  # type: ignore[arg-type]
    return render.history_line(event, AT)


def test_a_cached_completion_is_marked_and_a_run_one_is_not() -> None:
    served = _completed({"output": 49, "cached": True})
    ran = _completed({"output": 49})
    assert "output=49" in served and "(from the output cache)" in served
    assert "cache" not in ran and "output=49" in ran
