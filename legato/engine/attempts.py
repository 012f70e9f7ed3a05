"""What a finished attempt reports when it did not succeed (pure): the recorded error of
a task's exception, and why a return value cannot be stored. The worker and the
in-memory simulator both build their failures here."""

from __future__ import annotations

import traceback

from pydantic import JsonValue

from legato.engine.decider.model import TaskError
from legato.errors import InvalidOutput, OutputTooLarge
from legato.limits import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    clean_text,
    describe_exception,
    json_problem,
    json_size,
    truncated,
)


def error_of(exc: BaseException, retryable: bool) -> TaskError:
    """How a task's exception is recorded: its type, message and traceback.

    Never raises, whatever the exception does: a report that cannot be built would
    hold the attempt's worker slot forever. The message and traceback are capped (the
    error is stored with the attempt, in history and on the failed run) and made
    encodable (a lone surrogate would make PostgreSQL refuse the whole report batch).
    """
    name = type(exc).__qualname__
    message = describe_exception(exc)
    try:
        trace = "".join(traceback.format_exception(exc))
    except Exception:
        trace = None
    return TaskError(
        type=name,
        message=truncated(clean_text(message), MAX_ERROR_MESSAGE_CHARS),
        retryable=retryable,
        traceback=None
        if trace is None
        else truncated(clean_text(trace), MAX_TRACEBACK_CHARS, keep="tail"),
    )


def output_error(output: JsonValue, max_output_bytes: int) -> TaskError | None:
    """Why a task's JSON return value cannot be stored, or None. Not retryable: the
    same code returns the same value again."""
    problem = json_problem(output)
    if problem is not None:
        return TaskError(
            type=InvalidOutput.__name__,
            message=f"the task's return value is not storable JSON: {problem}",
            retryable=False,
        )
    if _surely_within(output, max_output_bytes):
        return None
    size = json_size(output)
    if size > max_output_bytes:
        return TaskError(
            type=OutputTooLarge.__name__,
            message=f"the task returned {size} bytes of JSON, over the {max_output_bytes}-byte "
            "limit (max_output_bytes of the Worker or Runtime): store large results "
            "elsewhere and return a reference",
            retryable=False,
        )
    return None


# Bytes of compact JSON a float, or any character of a string, takes at most
# (``-1.7976931348623157e+308``; ``\\u001f``).
_FLOAT_BYTES = 24
_CHAR_BYTES = 6


def _surely_within(output: JsonValue, max_bytes: int) -> bool:
    """Whether a scalar or string ``output`` is surely under ``max_bytes`` without
    serialising it: most outputs are, and the report serialises them again anyway."""
    if output is None or isinstance(output, bool | float):
        return max_bytes >= _FLOAT_BYTES
    if isinstance(output, int):
        return output.bit_length() // 3 + 2 <= max_bytes
    if isinstance(output, str):
        return len(output) * _CHAR_BYTES + 2 <= max_bytes
    return False
