"""``legato stats``: backlogs, runs by status, recent failures, leases and connections,
at a glance."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import JsonValue
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.cli import command, connected, number_in, render
from legato.engine.repositories import stats
from legato.schema import RunStatus

_FAILURES_WITHIN = timedelta(hours=1)


async def gather(conn: AsyncConnection, window: timedelta, now: datetime) -> dict[str, JsonValue]:
    """Every figure ``legato stats`` shows, as JSON (read on one autocommit connection)."""
    decide = await stats.decide_backlog(conn)
    backlog = await stats.task_backlog(conn)
    by_status = await stats.runs_by_status(conn, window)
    return {
        "decide_queue": {"depth": decide.depth, "oldest_age_seconds": decide.oldest_age(now)},
        "quarantined_runs": await stats.quarantined_count(conn),
        "task_queues": [
            {
                "queue": b.queue,
                "depth": b.depth,
                "oldest_age_seconds": b.oldest_age(now),
                "oldest_available_at": None if b.oldest is None else b.oldest.isoformat(),
            }
            for b in backlog
        ],
        "runs": {
            "running": await stats.running_runs(conn),
            "window_hours": window.total_seconds() / 3600,
            "created_in_window": {s.value.lower(): by_status.get(s, 0) for s in RunStatus},
        },
        "failures_last_hour": [
            {"workflow": f.workflow, "node": f.node, "error_type": f.error_type, "count": f.count}
            for f in await stats.recent_failures(conn, _FAILURES_WITHIN, window)
        ],
        "leases": [
            {
                "worker": lease.worker,
                "held": lease.held,
                "next_expiry": lease.next_expiry.isoformat(),
            }
            for lease in await stats.leases_by_worker(conn)
        ],
        "connections": [
            {
                "application_name": c.application,
                "total": c.total,
                "active": c.active,
                "idle_in_transaction": c.idle_in_transaction,
            }
            for c in await stats.connections_by_application(conn)
        ],
    }


def text_lines(figures: dict[str, Any]) -> list[str]:
    """The figures as the plain-text report."""
    decide = figures["decide_queue"]
    runs = figures["runs"]
    lines = [
        f"decide queue: {decide['depth']} due, oldest waiting {decide['oldest_age_seconds']:.1f}s",
        f"quarantined runs: {figures['quarantined_runs']}"
        + (" (legato runs list --quarantined)" if figures["quarantined_runs"] else ""),
        "",
        "task queues (ready, unclaimed)",
    ]
    queues = [
        [q["queue"], str(q["depth"]), f"{q['oldest_age_seconds']:.1f}s"]
        for q in figures["task_queues"]
    ]
    lines += [f"  {line}" for line in render.table(["QUEUE", "READY", "OLDEST"], queues)]
    if not queues:
        lines.append("  (empty)")
    created = ", ".join(f"{n} {status}" for status, n in runs["created_in_window"].items())
    lines += [
        "",
        f"runs: {runs['running']} running; created in the last {runs['window_hours']:g}h: "
        f"{created}",
        "",
        "failed or timed-out attempts in the last hour",
    ]
    failures = [
        [f["workflow"], f["node"], f["error_type"], str(f["count"])]
        for f in figures["failures_last_hour"]
    ]
    table = render.table(["WORKFLOW", "NODE", "ERROR", "COUNT"], failures)
    lines += [f"  {line}" for line in table] if failures else ["  (none)"]
    lines += ["", "leases held"]
    leases = [[x["worker"], str(x["held"]), x["next_expiry"]] for x in figures["leases"]]
    table = render.table(["WORKER", "HELD", "NEXT EXPIRY"], leases)
    lines += [f"  {line}" for line in table] if leases else ["  (none)"]
    lines += ["", "connections to this database, by application_name"]
    held = [
        [
            c["application_name"] or "(none)",
            str(c["total"]),
            str(c["active"]),
            str(c["idle_in_transaction"]),
        ]
        for c in figures["connections"]
    ]
    table = render.table(["APPLICATION", "TOTAL", "ACTIVE", "IDLE IN TX"], held)
    lines += [f"  {line}" for line in table]
    return lines


async def _stats(args: argparse.Namespace) -> int:
    async with connected(args) as client, client.engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        figures = await gather(autocommit, timedelta(hours=args.window_hours), datetime.now(UTC))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for line in text_lines(figures):
            print(line)
    return 0


def register(commands: Any) -> None:
    parser = command(
        commands,
        "stats",
        "backlog per queue, runs by status, recent failures, leases per worker, connections",
        _stats,
        """examples:
  legato stats
  legato stats --json | jq '.task_queues'
  legato stats --window-hours 168

Reads partial indexes and the window's partitions only; it takes no locks.
Runs by status and failures count runs created within --window-hours.
Connections are grouped by application_name: each Legato process names itself
(legato worker, legato decider, ...; legato in a host application).""",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--window-hours",
        type=number_in(
            float, 0.0, 24.0 * 366, "a number of hours above 0, at most 8784", above_low=True
        ),
        default=24.0,
        metavar="H",
        help="count runs created in the last H hours for runs by status and failures (default: 24)",
    )
