"""Counting the transactions an engine really runs, the same way for every engine.

``pg_stat_database.xact_commit`` overstates: PostgreSQL counts a commit each time a
NOTIFY reaches an idle listening connection, and every engine here listens. So the
bench counts two things instead:

* **real transactions**: the embedded server logs each executed statement
  (``log_statement = all``, switched on for one scenario's database only) with the
  backend pid and virtual transaction id in the line prefix; the distinct
  ``(pid, vxid)`` pairs of the engine's connections are its transactions, read-only
  ones included, NOTIFY deliveries excluded (they execute no statement). The bench's
  own probes connect as :data:`PROBE_APP` and are left out.
* **write xids**: the growth of ``pg_current_snapshot()``'s xmax; every transaction
  that writes takes one xid (a savepoint that writes takes one more).

Only the embedded server has a log the bench can read; on ``--database-url`` the
real-transaction count is absent and the xids remain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The embedded server's ``log_line_prefix``: no spaces (pg_ctl passes ``-c`` options
#: through a shell), and the fields :func:`count_transactions` parses.
LOG_LINE_PREFIX = "@tx,%p,%d,%a,%v:"

#: The ``application_name`` of the bench's own connections (polling, counters).
PROBE_APP = "legato-bench-probe"

#: Server settings for a session whose statements are counted.
STATEMENT_LOG = "all"


def count_transactions(lines: Iterable[str], database: str) -> int:
    """Distinct transactions that executed a statement in ``database``, bench probes
    excluded, in server log lines written with :data:`LOG_LINE_PREFIX`."""
    seen: set[tuple[str, str]] = set()
    for line in lines:
        if not line.startswith("@tx,"):
            continue  # a continuation line of a multi-line statement, or another message
        head, _, message = line.partition(":")
        fields = head.split(",")
        if len(fields) != 5:
            continue
        _, pid, db, app, vxid = fields
        if db != database or app == PROBE_APP or not vxid or vxid.endswith("/0"):
            continue
        if "statement: " in message or "execute " in message:
            seen.add((pid, vxid))
    return len(seen)


@dataclass
class LogWindow:
    """The part of the server log written between :meth:`open` and :meth:`count`."""

    path: Path
    database: str
    offset: int = 0

    def open(self) -> None:
        self.offset = self.path.stat().st_size

    def count(self) -> int:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
        return count_transactions(text.splitlines(), self.database)
