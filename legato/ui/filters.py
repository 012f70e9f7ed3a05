"""The runs list's query string, parsed and checked: a bad value is an ``InvalidArgument``
naming the parameter and what it accepts (the dashboard answers 400 with it)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from legato.errors import InvalidArgument, InvalidRunId
from legato.limits import check_idempotency_key, check_name
from legato.schema import RunStatus, uuid7_bound

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
KNOWN = frozenset({"workflow", "status", "from", "to", "q", "before", "limit"})


@dataclass(frozen=True)
class RunFilter:
    workflow: str | None = None
    status: RunStatus | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    search_id: uuid.UUID | None = None
    search_key: str | None = None
    before: uuid.UUID | None = None
    limit: int = DEFAULT_LIMIT
    raw: tuple[tuple[str, str], ...] = ()

    @property
    def id_from(self) -> uuid.UUID | None:
        """The time range as ids: a UUIDv7 starts with its creation time in ms."""
        return None if self.created_from is None else uuid7_bound(_ms(self.created_from))

    @property
    def id_to(self) -> uuid.UUID | None:
        return None if self.created_to is None else uuid7_bound(_ms(self.created_to))

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


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


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


def parse_filter(params: Mapping[str, str]) -> RunFilter:
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
    limit = DEFAULT_LIMIT
    if "limit" in given:
        text = given["limit"]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise InvalidArgument(
                f"limit={text[:40]!r} must be a whole number from 1 to {MAX_LIMIT}"
            )
        limit = int(text)
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
    return RunFilter(
        workflow=workflow,
        status=status,
        created_from=created_from,
        created_to=created_to,
        search_id=search_id,
        search_key=search_key,
        before=before,
        limit=limit,
        raw=tuple((k, v) for k, v in given.items() if k != "before"),
    )
