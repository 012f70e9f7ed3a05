"""The pure rules of streaming progress: what an entry may hold and an attempt's bounds."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from legato import InvalidProgress, ProgressTooLarge, TaskContext
from legato.progress import (
    MAX_ATTEMPT_BYTES,
    MAX_ATTEMPT_ENTRIES,
    MAX_ENTRY_BYTES,
    AttemptBudget,
    checked_entry,
)


def test_an_entry_is_json_or_a_text_chunk_within_the_entry_bound() -> None:
    assert checked_entry("progress", {"done": 3, "of": 10}) == ({"done": 3, "of": 10}, 18)
    assert checked_entry("text", "tok") == ("tok", 5)
    with pytest.raises(InvalidProgress, match=r"\$\.when is a datetime"):
        checked_entry("progress", {"when": datetime.now(UTC)})
    with pytest.raises(InvalidProgress, match="takes a str chunk, not a dict"):
        checked_entry("text", {"a": 1})
    with pytest.raises(InvalidProgress, match=r"chunk 'a\\ud800' is not storable JSON.*surrogate"):
        checked_entry("text", "a\ud800")
    with pytest.raises(InvalidProgress, match=r"\$\[1\] is inf"):
        checked_entry("progress", [1, float("inf")])
    checked_entry("text", "x" * (MAX_ENTRY_BYTES - 2))
    with pytest.raises(ProgressTooLarge, match=f"{MAX_ENTRY_BYTES + 1} bytes is over the"):
        checked_entry("text", "x" * (MAX_ENTRY_BYTES - 1))


def test_an_attempt_is_refused_past_its_entries_or_its_bytes() -> None:
    budget = AttemptBudget()
    budget.check("progress", MAX_ATTEMPT_BYTES)
    budget.spend(MAX_ATTEMPT_BYTES)
    with pytest.raises(ProgressTooLarge, match=f"{MAX_ATTEMPT_BYTES + 1} bytes, over the"):
        budget.check("text", 1)
    many = AttemptBudget(entries=MAX_ATTEMPT_ENTRIES - 1)
    many.check("progress", 1)
    many.spend(1)
    with pytest.raises(ProgressTooLarge, match=f"written {MAX_ATTEMPT_ENTRIES} progress entries"):
        many.check("progress", 1)


def test_a_context_built_by_hand_checks_progress_and_keeps_nothing() -> None:
    ctx = TaskContext(run_id=uuid.uuid4(), task_id=uuid.uuid4(), workflow="w", node_id="n")
    asyncio.run(ctx.progress({"ok": True}))
    with pytest.raises(InvalidProgress):
        asyncio.run(ctx.progress(float("nan")))
