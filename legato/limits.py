"""The limits every user-supplied value meets before it is stored; pure functions.

Names (workflows, tasks, queues, events, nodes) are looked up through btree indexes,
whose rows PostgreSQL caps at about 2.7 kB: a longer name would be accepted, then
fail on every write of the run. Idempotency keys are part of a primary key for the
same reason. JSON payloads must be what PostgreSQL's ``jsonb`` accepts (no NaN or
infinities, no lone surrogates) and shallow enough to serialise without exhausting
Python's or the server's stack.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import timedelta

from pydantic import JsonValue

from legato.errors import InvalidInput, LegatoError

MAX_NAME_LENGTH = 200
MAX_IDEMPOTENCY_KEY_BYTES = 512
MAX_JSON_DEPTH = 100
# Python converts integers of at most 4,300 digits to and from text (the interpreter's
# default limit): a longer one could be stored, but no reader could load it again.
MAX_JSON_DIGITS = 4_299
MAX_JSON_INT = 10**MAX_JSON_DIGITS
MAX_ERROR_MESSAGE_CHARS = 4_000
MAX_TRACEBACK_CHARS = 8_000
# The largest value of the int4 ``priority`` columns.
MAX_PRIORITY = 2**31 - 1
# The longest duration a spec or a task option takes: a timeout, sleep, backoff or
# expiry near ``timedelta.max`` overflows the datetime it is added to when it is used.
MAX_DURATION = timedelta(days=3660)
# Each attempt of a task is a row of ``tasks`` (and events in its history).
MAX_ATTEMPTS = 10_000
# Past a few hundred the second retry already waits its ``max_backoff``; a larger factor
# only makes the delay arithmetic overflow.
MAX_BACKOFF_MULTIPLIER = 1_000.0
# A rate limit's bucket is counted in a float of tokens by every claim: over a million
# starts per period is no limit at all, and past 2**53 the count is no longer exact.
MAX_RATE_COUNT = 1_000_000

ErrorType = Callable[[str], LegatoError]


def _first_unprintable(value: str) -> str | None:
    # str.isprintable() is False for control, format, surrogate, private-use and
    # unassigned characters and for every separator but the ASCII space.
    if value.isprintable():
        return None
    return next(ch for ch in value if not ch.isprintable())


def name_problem(value: object, max_length: int = MAX_NAME_LENGTH) -> str | None:
    """Why ``value`` cannot be a name, or None: a non-empty ``str`` of at most
    ``max_length`` printable characters, without leading or trailing spaces."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"is {len(value)} characters long, over the {max_length}-character limit"
    bad = _first_unprintable(value)
    if bad is not None:
        return f"contains the unprintable character U+{ord(bad):04X}"
    if value != value.strip():
        return "must not start or end with a space"
    return None


def check_name(what: str, value: object, error: ErrorType) -> str:
    """``value`` if it is a valid name, else raise ``error`` naming ``what`` and the value."""
    problem = name_problem(value)
    if problem is not None:
        raise error(f"{what} {_shown(value)} {problem}; {_NAME_RULE}")
    assert isinstance(value, str)  # name_problem checked it
    return value


_NAME_RULE = f"names are 1 to {MAX_NAME_LENGTH} printable characters"


def check_idempotency_key(value: object, error: ErrorType) -> str:
    """``value`` if it is a valid idempotency key: a non-empty ``str`` of printable
    characters, at most ``MAX_IDEMPOTENCY_KEY_BYTES`` bytes in UTF-8."""
    rule = (
        f"idempotency keys are non-empty strings of printable characters, "
        f"at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes in UTF-8"
    )
    if not isinstance(value, str):
        raise error(f"idempotency key {_shown(value)} must be a string; {rule}")
    if not value:
        raise error(f"idempotency key {_shown(value)} is empty; {rule}")
    bad = _first_unprintable(value)
    if bad is not None:
        raise error(
            f"idempotency key {_shown(value)} contains the unprintable character "
            f"U+{ord(bad):04X}; {rule}"
        )
    size = len(value.encode())
    if size > MAX_IDEMPOTENCY_KEY_BYTES:
        raise error(f"idempotency key {_shown(value)} is {size} bytes; {rule} (hash longer keys)")
    return value


def json_problem(value: object, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` cannot be stored as ``jsonb``, or None.

    Walks iteratively, so a value nested a million deep is refused rather than
    overflowing the stack. Accepts what ``json.dumps`` writes as standard JSON: dicts
    with string keys, lists and tuples, strings, finite numbers, booleans and None.
    """
    stack: list[tuple[object, int, str]] = [(value, 1, "$")]
    while stack:
        item, depth, path = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -MAX_JSON_INT < item < MAX_JSON_INT:
                return f"{path} is an integer of more than {MAX_JSON_DIGITS:,} digits"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{path} is {item}, which JSON cannot represent"
            continue
        if isinstance(item, str):
            if _has_surrogate(item):
                return f"{path} is a string with a lone surrogate, which is not valid Unicode"
            continue
        if depth > max_depth:
            return f"nesting is deeper than {max_depth} levels (at {path})"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{path} has the key {key!r}, which is not a string"
                if _has_surrogate(key):
                    return f"{path} has a key with a lone surrogate, which is not valid Unicode"
                stack.append((child, depth + 1, f"{path}.{key[:40]}"))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))
        else:
            return f"{path} is a {type(item).__name__}, which is not JSON"
    return None


def check_json(what: str, value: object, error: ErrorType) -> JsonValue:
    """``value`` if it can be stored as ``jsonb``, else raise ``error`` naming ``what``."""
    problem = json_problem(value)
    if problem is not None:
        raise error(f"{what} is not storable JSON: {problem}")
    return value  # type: ignore[return-value]  # json_problem walked every element


def _has_surrogate(value: str) -> bool:
    if value.isascii():
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return True
    return False


def describe_exception(exc: BaseException) -> str:
    """``str(exc)`` (or its type's name when empty), and never raises: an exception whose
    ``__str__`` raises is described by its type and what ``__str__`` raised."""
    name = type(exc).__qualname__
    try:
        return str(exc) or name
    except Exception as broken:
        return f"{name} (its __str__ raised {type(broken).__qualname__})"


def clean_text(value: str) -> str:
    """``value`` with lone surrogates written as ``\\udxxx`` escapes, so it encodes."""
    return value.encode("utf-8", "backslashreplace").decode() if _has_surrogate(value) else value


def truncated(value: str, limit: int, *, keep: str = "head") -> str:
    """``value`` cut to at most about ``limit`` characters with a marker saying how much
    was dropped; ``keep="tail"`` keeps the end (the newest frames of a traceback)."""
    if len(value) <= limit:
        return value
    marker = f"... [truncated {len(value) - limit} characters] ..."
    return value[:limit] + marker if keep == "head" else marker + value[-limit:]


def check_timeout(what: str, value: object, error: ErrorType) -> timedelta | None:
    """``value`` if it is None or a positive ``timedelta``, else raise ``error``."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise error(f"{what} must be a datetime.timedelta, not {type(value).__name__} {value!r}")
    if value <= timedelta(0):
        raise error(f"{what} must be positive, got {value!r}; omit it for no timeout")
    if value > MAX_DURATION:
        raise error(f"{what} {value!r} is over {MAX_DURATION.days} days; omit it for no timeout")
    return value


def check_type(what: str, value: object, expected: type[object], error: ErrorType) -> None:
    """Raise ``error`` unless ``value`` is an instance of ``expected``."""
    if not isinstance(value, expected):
        raise error(f"{what} must be a {expected.__name__}, not {type(value).__name__} {value!r}")


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= 60:
        return text
    # A string's own length, as the message around it counts (not its repr's).
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} chars"
    return f"{text[:50]}...{text[-6:]} ({size})"


def json_size(value: JsonValue) -> int:
    """Bytes of ``value``'s compact JSON (how payload and output limits are measured)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


_JSON_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply JSON ``text`` nests arrays and objects, counted without parsing it
    (brackets inside strings do not count) and only up to ``limit + 1``.

    ``json.loads`` recurses once per level: a deep enough input exhausts the stack, so
    the depth is checked first."""
    depth = deepest = 0
    for token in _JSON_STRING_OR_BRACKET.finditer(text):
        first = text[token.start()]
        if first in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif first in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (use null, a number or a string)")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range for a JSON number")
    return number


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # past Python's 4,300-digit limit on converting text to int
        raise ValueError(f"a {len(text):,}-digit number is too long") from None


def parse_json_text(text: str, what: str, shown: str | None = None) -> JsonValue:
    """JSON ``text`` from outside (a CLI option, a form field, a request body) as a value
    ``jsonb`` can store, or ``InvalidInput`` naming ``what`` and the text as ``shown``:
    at most ``MAX_JSON_DEPTH`` levels deep (checked before parsing), no NaN or Infinity,
    no number past Python's 4,300 digits, no lone surrogate."""
    shown = _shown(text) if shown is None else shown
    if json_depth(text) > MAX_JSON_DEPTH:
        raise InvalidInput(
            f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep (got {shown})"
        )
    try:
        parsed: JsonValue = json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer
        )
    except ValueError as error:  # JSONDecodeError, NaN, 1e400, an int of 5,000 digits
        raise InvalidInput(f"{what} is not valid JSON: {error} (got {shown})") from None
    try:  # "\ud800" parses, but no UTF-8 text (and so no jsonb) can hold it
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{what} holds a lone UTF-16 surrogate (\\ud800 to \\udfff not in a pair): {shown}"
        ) from None
    return parsed
