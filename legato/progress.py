"""Streaming progress: what a running task reports (``ctx.progress(value)``, a JSON
value; ``ctx.stream(text)``, a text chunk), the entry ``Client.stream`` yields, and the
bounds of one attempt's progress; pure.

Every entry is written durably before ``ctx.progress`` returns, in its run's order
(``seq``, gap-free from 1 per run), tagged with its node, iteration and attempt, so a
retried attempt's entries are told from the first's. An attempt's progress is bounded:
an entry over ``MAX_ENTRY_BYTES``, or one that would take the attempt past
``MAX_ATTEMPT_ENTRIES`` entries or ``MAX_ATTEMPT_BYTES`` bytes, is *refused* with
``ProgressTooLarge`` (nothing written; what came before stays). Refused, not dropped:
the body learns at once that a report was not kept, and may catch the error and go on.
The writer is ``legato.engine.progress_writer``; the table ``run_progress``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import JsonValue

from legato.errors import InvalidProgress, ProgressTooLarge
from legato.limits import check_json, json_size

ProgressKind = Literal["progress", "text"]
KINDS: tuple[ProgressKind, ...] = ("progress", "text")

MAX_ENTRY_BYTES = 64 * 1024
MAX_ATTEMPT_BYTES = 1024 * 1024
MAX_ATTEMPT_ENTRIES = 10_000


@dataclass(frozen=True)
class ProgressEntry:
    """One report of a running task, as ``Client.stream`` yields it. ``seq`` orders a
    run's entries and is the cursor: ``Client.stream(run_id, after=entry.seq)`` resumes
    after it. ``kind`` is ``"progress"`` (``value`` any JSON) or ``"text"`` (``value`` a
    string chunk, from ``ctx.stream``)."""

    run_id: uuid.UUID
    seq: int
    node_id: str
    iteration: int
    attempt: int
    task_id: uuid.UUID
    kind: ProgressKind
    value: JsonValue
    created_at: datetime


def checked_entry(kind: ProgressKind, value: object) -> tuple[JsonValue, int]:
    """The value to store and its size in bytes, or ``InvalidProgress`` /
    ``ProgressTooLarge`` naming what is wrong."""
    if kind == "text":
        if not isinstance(value, str):
            raise InvalidProgress(
                f"ctx.stream({value!r:.80}) takes a str chunk, not a {type(value).__name__}: "
                "report other values with ctx.progress(value)"
            )
        stored: JsonValue = check_json(f"ctx.stream chunk {value!r:.80}", value, InvalidProgress)
    else:
        stored = check_json(f"ctx.progress value {value!r:.80}", value, InvalidProgress)
    size = json_size(stored)
    if size > MAX_ENTRY_BYTES:
        raise ProgressTooLarge(
            f"a ctx.{_call(kind)} entry of {size} bytes is over the {MAX_ENTRY_BYTES}-byte "
            "bound of one entry: report it in smaller pieces, or store it elsewhere and "
            "report where"
        )
    return stored, size


@dataclass
class AttemptBudget:
    """What one attempt has written so far, against the attempt's bounds."""

    entries: int = 0
    bytes: int = 0

    def check(self, kind: ProgressKind, size: int) -> None:
        """Refuse an entry of ``size`` bytes that would take the attempt past a bound."""
        if self.entries + 1 > MAX_ATTEMPT_ENTRIES:
            raise ProgressTooLarge(
                f"this attempt has written {self.entries} progress entries, the bound of one "
                f"attempt ({MAX_ATTEMPT_ENTRIES}): this ctx.{_call(kind)} entry is refused; "
                "report less often (e.g. every 1% rather than every item)"
            )
        if self.bytes + size > MAX_ATTEMPT_BYTES:
            raise ProgressTooLarge(
                f"this ctx.{_call(kind)} entry of {size} bytes would take the attempt's "
                f"progress to {self.bytes + size} bytes, over the {MAX_ATTEMPT_BYTES}-byte "
                "bound of one attempt: it is refused; report smaller or fewer entries"
            )

    def spend(self, size: int) -> None:
        self.entries += 1
        self.bytes += size


def _call(kind: ProgressKind) -> str:
    return "stream" if kind == "text" else "progress"
