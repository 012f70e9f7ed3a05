"""Reporting what happened to attempts: the one path by which workers, the timer loop,
the lease sweeper and finished child runs hand facts to the decider.

One transaction: first the decide_queue upserts, in (key, run id) order (the upsert
takes the run's decide row lock before anything else, so a report that races a
decision waits for it and re-queues the run — no lost wake-up, and one lock order
everywhere), then the queue rows' deletion, then the fenced task updates. In the
distributed layout each kind is one statement per key (a batch holding reports of
three keys is three statements of each kind, each touching one key); on one
PostgreSQL one statement of each kind spans the batch's keys, and a worker's flush is
one statement that commits on its own (:func:`write_alone`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import decide_queue, queue_leases, report_write, tasks
from legato.engine.transport.driver import DriverStatements
from legato.engine.transport.handoff import Absorbed, LocalReports
from legato.schema import Shards


@dataclass(frozen=True)
class Report:
    """A fenced transition of an attempt of a run of key ``shard``, plus the attempt's
    queue row, if it has one.

    ``only_if_unleased`` keeps the queue row when a worker has leased it (a
    schedule-to-start timeout must not take away an attempt that just started).
    """

    move: tasks.Transition
    shard: int
    queue_key: tuple[str, uuid.UUID] | None = None
    only_if_unleased: bool = False


def in_one_statement(reports: Sequence[Report], layout: Shards) -> bool:
    """Whether a worker's flush of ``reports`` can be one statement committed on its own
    (:func:`write_alone`, pure): on one PostgreSQL, when each report's queue row goes
    whoever holds it and every move leaves the same states (a worker's reports do)."""
    return (
        not layout.distributed
        and not any(r.only_if_unleased for r in reports)
        and len({frozenset(r.move.from_states) for r in reports}) == 1
    )


async def write_alone(
    driver: DriverStatements,
    reports: Sequence[Report],
    reason: str,
    layout: Shards,
    on_connection: Callable[[asyncpg.Connection], None] | None = None,
) -> int:
    """:func:`apply_reports` as one statement that commits on its own, on the asyncpg
    driver path (``repositories.report_write``): for reports :func:`in_one_statement`
    accepts. Returns how many were not stale."""
    queue_keys = [(r.shard, *r.queue_key) for r in reports if r.queue_key]
    moves = [r.move for r in reports]
    sources = moves[0].from_states
    return len(
        await report_write.write(
            driver, layout.count, queue_keys, moves, sources, reason, on_connection
        )
    )


async def write_flush(
    driver: DriverStatements,
    batch: Sequence[Report],
    layout: Shards,
    local: LocalReports | None,
    decide_channel: str,
    absorbed: list[Absorbed],
) -> None:
    """A worker's flush of ``batch``: one statement committed on its own where it can be
    (:func:`in_one_statement`: one round trip), else :func:`apply_reports` in one
    transaction. With a decider in the process (``local``), ``absorbed`` gets what the
    write's NOTIFY absorb on ``decide_channel`` registered: the worker nudges that
    decider in memory instead (``ReportsToDecider.committing`` gives the absorb back if
    the write fails)."""
    if in_one_statement(batch, layout):
        if local is None:
            await write_alone(driver, batch, "task finished", layout)
            return

        def absorb(connection: asyncpg.Connection) -> None:
            # On the connection the statement goes out on (the next, if that one is dead).
            for stale in absorbed:
                local.unabsorb(stale)
            pid = int(connection.get_server_pid())
            absorbed[:] = [local.absorb_backend(pid, decide_channel)]

        await write_alone(driver, batch, "task finished", layout, absorb)
        return
    async with driver.engine.begin() as conn:
        await apply_reports(conn, batch, "task finished", layout=layout)
        if local is not None:
            absorbed.append(await local.absorb(conn, decide_channel))


def by_shard(reports: Sequence[Report]) -> dict[int, list[Report]]:
    """Reports by key, keys ascending, each key's in their order (pure)."""
    grouped: dict[int, list[Report]] = {}
    for report in reports:
        grouped.setdefault(report.shard, []).append(report)
    return dict(sorted(grouped.items()))


async def apply_reports(
    conn: AsyncConnection,
    reports: Sequence[Report],
    reason: str,
    *,
    layout: Shards | None = None,
) -> int:
    """Apply reports in the caller's transaction; returns how many were not stale.

    The runs' decide rows (in (key, run id) order), then the queue rows, then the task
    rows: one statement of each kind per key, keys ascending, each filtered by that
    key — unless ``layout`` is a single-node installation's (``Shards.distributed``
    False) and the reports span keys: then one statement of each kind for every key of
    the batch (the ``*_held`` statements), in the same lock order. Callers whose
    reports are of one key (a transactional attempt's completion) pass no layout.
    Stale reports (an attempt already finished, cancelled or superseded) change no
    task; their queue rows go, because their attempt is over. The deciders are
    notified at commit (decide_queue's trigger, once per key).
    """
    grouped = by_shard(reports)
    if layout is not None and not layout.distributed and len(grouped) > 1:
        return await _apply_held(conn, layout.count, reports, reason)
    applied = 0
    for shard, group in grouped.items():
        await decide_queue.enqueue(conn, shard, (report.move.run_id for report in group), reason)
        await queue_leases.remove(
            conn, shard, [r.queue_key for r in group if r.queue_key and not r.only_if_unleased]
        )
        await queue_leases.remove(
            conn,
            shard,
            [r.queue_key for r in group if r.queue_key and r.only_if_unleased],
            unleased=True,
        )
        applied += len(await tasks.transition_many(conn, shard, [r.move for r in group]))
    return applied


async def _apply_held(
    conn: AsyncConnection, count: int, reports: Sequence[Report], reason: str
) -> int:
    await decide_queue.enqueue_held(conn, count, (r.move.run_id for r in reports), reason)
    for unleased in (False, True):
        await queue_leases.remove_held(
            conn,
            [
                (r.shard, *r.queue_key)
                for r in reports
                if r.queue_key and r.only_if_unleased is unleased
            ],
            unleased=unleased,
        )
    return len(await tasks.transition_many_held(conn, count, [r.move for r in reports]))
