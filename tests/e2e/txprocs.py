"""A worker process for the transactional-task kill tests:
``python -m tests.e2e.txprocs --database-url URL [--kill-at POINT --marker-dir DIR]``.

With ``--kill-at``, the process stops at POINT of its first attempt (see
``tests/e2e/txflows.py``), leaves a marker naming the run and hangs there for the test
to ``kill -9``: inside the task's body, just before the completion's commit (after the
fenced completion was applied in the transaction), or just after that commit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine import reports as legato_reports
from legato.engine.loops import worker, worker_attempts
from legato.engine.reports import Report
from legato.runtime import Roles
from legato.schema import Shards
from tests.e2e import txflows
from tests.e2e.procs import serve


def stop_around_commit(victim: txflows.Victim) -> None:
    apply_reports = legato_reports.apply_reports
    finished = worker.Worker._finished

    async def apply_then_stop(
        conn: AsyncConnection,
        reports: Sequence[Report],
        reason: str,
        *,
        layout: Shards | None = None,
    ) -> int:
        applied = await apply_reports(conn, reports, reason, layout=layout)
        await victim.reached("before_commit", reports[0].move.run_id)
        return applied

    def finished_then_stop(
        self: worker.Worker, task_ids: list[uuid.UUID], shards: set[int]
    ) -> None:
        # Called right after the commit, before the worker frees the slot.
        (flight,) = [self._inflight[task_id] for task_id in task_ids]
        victim.reached_blocking(txflows.AFTER_COMMIT, flight.claimed.run_id)
        finished(self, task_ids, shards)

    # The transactional completion, and a report the worker flushes.
    worker_attempts.apply_reports = apply_then_stop  # type: ignore[attr-defined]
    worker.apply_reports = apply_then_stop  # type: ignore[attr-defined]
    worker.Worker._finished = finished_then_stop  # type: ignore[method-assign]


async def main(args: argparse.Namespace) -> None:
    if args.kill_at:
        txflows.VICTIM = txflows.Victim(args.kill_at, Path(args.marker_dir))
        stop_around_commit(txflows.VICTIM)
    await serve(
        txflows.app,
        Roles(decider=False, timer=False),
        args.database_url,
        args.concurrency,
        args.lease,
        args.shard_lease,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    # An attempt's lease: long enough that a stall of a loaded machine (the victims, the
    # test process and the server on two shared cores) does not expire a victim's lease
    # before its attempt reaches its point (the attempt would be retried, and the test's
    # account of which attempt did the work would be off by one); short enough that the
    # killed victims' attempts expire soon for the fresh worker.
    parser.add_argument("--lease", type=float, default=5.0)
    # Long enough that no victim loses its keys to a stall of a loaded machine between
    # the test reading the shares and the victims claiming (the test removes the rows
    # of the victims it killed itself).
    parser.add_argument("--shard-lease", type=float, default=30.0)
    parser.add_argument("--kill-at")
    parser.add_argument("--marker-dir")
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parser.parse_args()))
