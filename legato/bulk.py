"""Bulk actions by filter: cancel, rerun or resume every run a ``RunFilter`` chooses.

The runs are read a page at a time, newest first, keyset-paginated by id
(``runs.list_runs``: a fan-out across shard keys), and each run is acted on in a
transaction of its own, of its own key: no action holds more than one run's lock, and
a bulk action over thousands of runs is thousands of short transactions, never one
long one. Each action is idempotent, so a bulk action interrupted anywhere (even by
``kill -9``: the run in hand rolls back) and started again does the rest and touches
no run twice: a run already cancelled, no longer quarantined, or (for a rerun) already
rerun is skipped. Runs a bulk rerun starts are newer than every page it reads, so it
never meets them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.arguments import check_aware, check_int_argument, run_status
from legato.engine.repositories import decide_queue, runs
from legato.errors import InvalidArgument, LegatoError
from legato.limits import check_name
from legato.models import BulkResult, RunFilter
from legato.rerun import Specs, Version, rerun
from legato.schema import RunStatus, Shards

Action = Literal["cancel", "rerun", "resume"]
ACTIONS: tuple[Action, ...] = ("cancel", "rerun", "resume")
PAGE = 100  # runs read per page
MAX_ERRORS = 20  # the refusals a result keeps

Progress = Callable[[BulkResult], None]


@dataclass(frozen=True)
class RerunOptions:
    from_node: str | None = None
    version: Version = "deployed"


def run_filter(
    *,
    workflow: object = None,
    version: object = None,
    status: object = None,
    created_after: object = None,
    created_before: object = None,
    error_type: object = None,
    node: object = None,
) -> RunFilter:
    """The criteria of a run listing or a bulk action, checked (``InvalidArgument``)."""

    def name(option: str, value: object) -> str | None:
        return None if value is None else check_name(option, value, InvalidArgument)

    after = None if created_after is None else check_aware("created_after", created_after)
    until = None if created_before is None else check_aware("created_before", created_before)
    if after is not None and until is not None and after >= until:
        raise InvalidArgument(
            f"created_after={after.isoformat()} must be before created_before={until.isoformat()}"
        )
    return RunFilter(
        workflow=name("workflow", workflow),
        version=None if version is None else check_int_argument("version", version, 1),
        status=None if status is None else run_status(status),
        created_after=after,
        created_before=until,
        error_type=name("error_type", error_type),
        node=name("node", node),
    )


def checked_filter(where: object) -> RunFilter:
    """A bulk action's or count's ``where``: a ``RunFilter`` whose criteria are checked."""
    if where is None:
        return RunFilter()
    if not isinstance(where, RunFilter):
        raise InvalidArgument(
            f"where={where!r} must be a legato.RunFilter, e.g. "
            "RunFilter(workflow='signup', status=RunStatus.FAILED)"
        )
    return run_filter(**{f.name: getattr(where, f.name) for f in fields(where)})


async def count(engine: AsyncEngine, chosen: RunFilter) -> int:
    """How many runs ``chosen`` chooses now (a fan-out across keys)."""
    async with engine.connect() as conn:
        return await runs.count_runs(conn, chosen)


async def act(
    engine: AsyncEngine,
    shards: Shards,
    chosen: RunFilter,
    action: Action,
    *,
    rerun_options: RerunOptions | None = None,
    specs: Specs | None = None,
    progress: Progress | None = None,
    page: int = PAGE,
) -> BulkResult:
    """Apply ``action`` to every run ``chosen`` chooses, page by page; the counts."""
    options = rerun_options or RerunOptions()
    specs = specs or Specs()
    result = BulkResult()
    before: uuid.UUID | None = None
    while True:
        async with engine.connect() as conn:
            batch = await runs.list_runs(conn, chosen, before=before, limit=page)
        for run in batch:
            try:
                acted = await _one(engine, shards, specs, run, action, options)
            except LegatoError as error:
                errors = result.errors
                if len(errors) < MAX_ERRORS:
                    errors = (*errors, (run.id, str(error)))
                result = replace(
                    result, matched=result.matched + 1, failed=result.failed + 1, errors=errors
                )
            else:
                result = replace(
                    result,
                    matched=result.matched + 1,
                    done=result.done + acted,
                    skipped=result.skipped + (not acted),
                )
            if progress is not None:
                progress(result)
        if len(batch) < page:
            return result
        before = batch[-1].id


async def _one(
    engine: AsyncEngine,
    shards: Shards,
    specs: Specs,
    run: runs.RunRow,
    action: Action,
    options: RerunOptions,
) -> bool:
    """Act on one run in its own transaction; False when there was nothing to do."""
    shard = shards.of_run(run.id)
    if action == "rerun":
        started = await rerun(
            engine,
            shards,
            specs,
            run.id,
            from_node=options.from_node,
            version=options.version,
            unless_rerun=True,
        )
        return started is not None
    if action == "resume":
        async with engine.begin() as conn:
            return await decide_queue.resume(conn, shard, run.id)
    if run.status is not RunStatus.RUNNING or run.cancel_requested:
        return False
    async with engine.connect() as conn, conn.begin() as transaction:
        # Client.cancel's order: the decide row's lock before the run's.
        await decide_queue.enqueue(conn, shard, [run.id], "cancel requested")
        if await runs.request_cancel(conn, shard, run.id):
            return True
        await transaction.rollback()  # it finished since the page was read
        return False
