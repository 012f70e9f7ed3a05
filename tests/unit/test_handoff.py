"""Which enqueued attempts a decision may hand to its process's worker (pure)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from legato.engine.repositories.task_queue import NewQueueRow
from legato.engine.transport.handoff import eligible

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _row(queue: str, name: str, priority: int = 0, delay: float = 0.0) -> NewQueueRow:
    return NewQueueRow(
        queue, uuid.uuid4(), uuid.uuid4(), 1, name, priority, NOW + timedelta(seconds=delay)
    )


def test_only_available_attempts_the_worker_serves_best_first() -> None:
    late = _row("default", "a", delay=-1.0)
    urgent = _row("default", "a", priority=5)
    retry_later = _row("default", "a", delay=0.5)  # a retry's back-off: not claimable yet
    other_queue = _row("bulk", "a")
    unknown_task = _row("default", "b")
    rows = [late, retry_later, other_queue, urgent, unknown_task]
    assert eligible(rows, NOW, frozenset({("default", "a")})) == [urgent, late]
    assert eligible(rows, NOW, frozenset()) == []
