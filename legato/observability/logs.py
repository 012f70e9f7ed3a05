"""Log records that carry where they come from, and a JSON formatter for them.

Legato only creates records (a library must not configure the root logger); the
``legato`` CLI installs a handler with :class:`JsonFormatter` under ``--log-format
json``. Every record about an attempt or a run carries the context fields in
``extra`` (``run_id``, ``workflow``, ``node``, ``iteration``, ``attempt``, ``task``),
so any formatter that reads record attributes picks them up.

The formatter is the standard library's ``json`` over the record's attributes: it
needs no dependency for the core package, and the shape is small enough that a
library (python-json-logger, structlog) would only add a translation layer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("run_id", "workflow", "node", "iteration", "attempt", "task")

# The attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


NAMED_RUNS = 5  # run ids a log line about a batch names before it counts the rest


def named_runs(run_ids: Iterable[object]) -> str:
    """The distinct runs of a batch for one log line: the first few ids, then how many
    more (a failed report flush names the runs an operator can look up)."""
    distinct = list(dict.fromkeys(str(run_id) for run_id in run_ids))
    named = ", ".join(distinct[:NAMED_RUNS])
    more = len(distinct) - NAMED_RUNS
    return f"{named} and {more} more" if more > 0 else named


def attempt_context(
    run_id: object, workflow: str, node: str, iteration: int, attempt: int, task: str | None
) -> dict[str, Any]:
    """The ``extra`` of a record about one attempt (ids as strings, so JSON carries them)."""
    return {
        "run_id": str(run_id),
        "workflow": workflow,
        "node": node,
        "iteration": iteration,
        "attempt": attempt,
        "task": task,
    }


class ContextAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger adapter adding a fixed context to every record; an ``extra`` given to
    one call is merged over it instead of replacing it."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        given: Mapping[str, Any] = kwargs.get("extra") or {}
        kwargs["extra"] = {**(self.extra or {}), **given}
        return msg, kwargs


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, every ``extra`` field,
    and the exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)
