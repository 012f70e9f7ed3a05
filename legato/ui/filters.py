"""The runs list's query string, parsed and checked: a bad value is an ``InvalidArgument``
naming the parameter and what it accepts (the dashboard answers 400 with it). Its
criteria are those of ``legato runs list`` (a ``legato.RunFilter``), plus the search
box and the page."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlencode

from legato.errors import InvalidArgument, InvalidRunId
from legato.limits import check_idempotency_key, check_name
from legato.models import RunFilter
from legato.schema import RunStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_VERSION = 2**31 - 1
KNOWN = frozenset(
    {"workflow", "version", "status", "from", "to", "error_type", "node", "q", "before", "limit"}
)


@dataclass(frozen=True)
class RunsListQuery:
    """What the runs list shows: the runs ``chosen`` picks (``from``/``to`` are its
    ``created_after``/``created_before``), narrowed by the search box, a page of them."""

    chosen: RunFilter = field(default_factory=RunFilter)
    search_id: uuid.UUID | None = None
    search_key: str | None = None
    before: uuid.UUID | None = None
    limit: int = DEFAULT_LIMIT
    raw: tuple[tuple[str, str], ...] = ()

    def given(self, key: str) -> str:
        """The value the query string gave ``key`` ("" if none), to refill the form."""
        return dict(self.raw).get(key, "")

    def query_string(self, **changes: str | None) -> str:
        """This filter's query string with ``changes`` applied (None removes a key)."""
        values = dict(self.raw)
        for key, value in changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        return urlencode(values)


def _time(name: str, value: str) -> datetime:
    """ISO 8601 (a ``<input type=datetime-local>`` sends ``2025-01-31T09:30``); a time
    without a zone is UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(
            f"{name}={value!r} is not a time: use ISO 8601, e.g. 2025-01-31T09:30 (UTC) "
            "or 2025-01-31T09:30+02:00"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def is_whole_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` alone takes "²", which ``int`` refuses."""
    return text.isascii() and text.isdigit()


def _whole(name: str, text: str, high: int) -> int:
    # 12 digits are past every bound.
    if not is_whole_number(text) or len(text) > 12 or not 1 <= int(text) <= high:
        raise InvalidArgument(f"{name}={text[:40]!r} must be a whole number from 1 to {high}")
    return int(text)


def single_values(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A query string's ``(name, value)`` pairs as one value per name: a name given
    twice is refused, not one of its values dropped."""
    counts = Counter(name for name, _ in pairs)
    repeated = sorted(name for name, count in counts.items() if count > 1)
    if repeated:
        raise InvalidArgument(
            f"parameter {repeated[0]!r:.80} is given more than once: give one value per filter"
        )
    return dict(pairs)


def parse_filter(params: Mapping[str, str]) -> RunsListQuery:
    """The filter a runs-list query string asks for; empty values mean "any"."""
    unknown = sorted(set(params) - KNOWN)
    if unknown:
        raise InvalidArgument(
            f"unknown parameter {unknown[0]!r}: the runs list takes {', '.join(sorted(KNOWN))}"
        )
    given = {k: v.strip() for k, v in params.items() if v.strip()}
    workflow = given.get("workflow")
    if workflow is not None:
        check_name("workflow", workflow, InvalidArgument)
    status = None
    if "status" in given:
        try:
            status = RunStatus(given["status"].upper())
        except ValueError:
            known = ", ".join(s.value for s in RunStatus)
            raise InvalidArgument(
                f"status={given['status']!r} is not a run status (one of {known})"
            ) from None
    created_from = _time("from", given["from"]) if "from" in given else None
    created_to = _time("to", given["to"]) if "to" in given else None
    if created_from is not None and created_to is not None and created_to <= created_from:
        raise InvalidArgument(
            f"to={given['to']!r} is not after from={given['from']!r}: the range is empty"
        )
    version = _whole("version", given["version"], MAX_VERSION) if "version" in given else None
    error_type, node = given.get("error_type"), given.get("node")
    if error_type is not None:
        check_name("error_type", error_type, InvalidArgument)
    if node is not None:
        check_name("node", node, InvalidArgument)
    limit = _whole("limit", given["limit"], MAX_LIMIT) if "limit" in given else DEFAULT_LIMIT
    before = None
    if "before" in given:
        try:
            before = uuid.UUID(given["before"])
        except ValueError:
            raise InvalidRunId(
                f"before={given['before'][:80]!r} is not a run id: it is the id of the last "
                "run of the previous page (follow the 'older' link)"
            ) from None
    search_id = search_key = None
    if "q" in given:
        try:
            search_id = uuid.UUID(given["q"])
        except ValueError:
            search_key = check_idempotency_key(given["q"], InvalidArgument)
    chosen = RunFilter(
        workflow=workflow,
        version=version,
        status=status,
        created_after=created_from,
        created_before=created_to,
        error_type=error_type,
        node=node,
    )
    return RunsListQuery(
        chosen=chosen,
        search_id=search_id,
        search_key=search_key,
        before=before,
        limit=limit,
        raw=tuple((k, v) for k, v in given.items() if k != "before"),
    )
