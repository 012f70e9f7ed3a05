"""The ``Client``'s reads and waits: a run's result, its history followed as it grows,
its details, and the run list."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime
from functools import partial

from pydantic import JsonValue
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from legato import bulk
from legato.arguments import (
    RunId,
    as_run_id,
    check_after_seq,
    check_limit,
    check_timeout,
)
from legato.client.base import ClientBase, schema_explained
from legato.engine.repositories import reruns, run_events, runs, tasks
from legato.engine.repositories.runs import RunRow
from legato.errors import ResultTimeout, RunFailed, RunNotFound
from legato.models import FINAL_EVENTS, HistoryEvent, RunDetails, RunPage, run_failed
from legato.models_from_rows import attempt_from_row, event_from_row, run_from_row
from legato.run_wakeups import woken
from legato.schema import RunStatus

# Events per history read: a longer history is read page by page.
_HISTORY_PAGE = 10_000


class RunReads(ClientBase):
    """Reading runs, and waiting for them: woken by the run's history NOTIFY, polling too."""

    @schema_explained
    async def result(self, run_id: RunId, timeout: float | None = None) -> JsonValue:
        """Wait until the run finishes; return its JSON output or raise ``RunFailed``.

        Woken by the run's history events (LISTEN/NOTIFY), re-reading the run row every
        ``poll_interval`` seconds too in case a notification is lost."""
        run = await self._wait_finished(as_run_id(run_id), check_timeout(timeout))
        if run.status is RunStatus.SUCCEEDED:
            return run.output
        raise await self._run_failed(run)

    async def _wait_finished(self, run_id: uuid.UUID, timeout: float | None) -> RunRow:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        run = await self._finished(run_id)
        if run is not None:  # already finished: no LISTEN needed
            return run
        async with self._wakeups.watching(run_id) as wake:
            while True:
                wake.clear()
                run = await self._finished(run_id)  # after LISTEN: no finish falls in between
                if run is not None:
                    return run
                wait = self.poll_interval
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        raise ResultTimeout(f"run {run_id} is still running after {timeout}s")
                if not await woken(wake, wait):
                    await self._wakeups.relisten()

    async def _finished(self, run_id: uuid.UUID) -> RunRow | None:
        """The run's row once it has finished; None while it runs."""
        shard = await self._shard_of(run_id)
        run = await self._read(lambda conn: runs.get(conn, shard, run_id))
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        return None if run.status is RunStatus.RUNNING else run

    async def _run_failed(self, run: RunRow) -> RunFailed:
        """``RunFailed`` for a finished run that did not succeed; a failure's history is
        read (only on this path) for the node attempt that failed it."""
        error = run_from_row(run).error
        history = [] if error is None else [e async for e in self._pages(run.id, 0)]
        return run_failed(run.id, run.status, error, history)

    async def _pages(self, run_id: uuid.UUID, after_seq: int) -> AsyncIterator[HistoryEvent]:
        """The run's events after ``after_seq``, read page by page to the current end."""
        shard = await self._shard_of(run_id)
        while True:
            page = await self._read(
                partial(
                    run_events.history,
                    shard=shard,
                    run_id=run_id,
                    after_seq=after_seq,
                    limit=_HISTORY_PAGE,
                )
            )
            for row in page:
                yield event_from_row(row)
                after_seq = row.seq
            if len(page) < _HISTORY_PAGE:
                return

    async def follow(self, run_id: RunId, after_seq: int = 0) -> AsyncGenerator[HistoryEvent, None]:
        """The run's history events after ``after_seq``, then each new one as it is
        appended, until the run has finished (its last event yielded).

        New events are read by seq when the run_events NOTIFY arrives, and every
        ``poll_interval`` seconds in case one is lost, so none is missed or repeated; to
        resume after a break, pass the last seq seen. Raises ``RunNotFound`` for an
        unknown run before yielding anything."""
        self._check_open()
        events = self._follow(run_id, after_seq)
        try:
            async for event in events:
                yield event
        except DBAPIError as error:
            await self._explain(error)
            raise
        finally:
            await events.aclose()

    async def _follow(self, run_id: RunId, after_seq: int) -> AsyncGenerator[HistoryEvent, None]:
        run_id = as_run_id(run_id)
        seq = check_after_seq(after_seq)
        shard = await self._shard_of(run_id)
        if await self._read(lambda conn: runs.get(conn, shard, run_id)) is None:
            raise RunNotFound(f"no run {run_id}")
        async with self._wakeups.watching(run_id) as wake:
            finished = False
            while True:
                wake.clear()
                ended = False
                async for event in self._pages(run_id, seq):
                    yield event
                    seq = event.seq
                    ended = ended or event.type in FINAL_EVENTS
                if ended or finished:
                    return
                if not await woken(wake, self.poll_interval):
                    await self._wakeups.relisten()
                    # A run can finish without a final event we saw (or the NOTIFY was
                    # lost): read its status, then read the history once more.
                    finished = await self._finished(run_id) is not None

    @schema_explained
    async def get_run(self, run_id: RunId) -> RunDetails:
        """A run with its attempts and history (``legato runs show``)."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)

        async def read(conn: AsyncConnection) -> RunDetails:
            run = await runs.get(conn, shard, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            rows = (await tasks.load_many(conn, shard, [run_id]))[run_id]
            events = await run_events.history(conn, shard, run_id)
            rerun_of, later = await reruns.links(conn, shard, run_id)
            return RunDetails(
                run=run_from_row(run),
                tasks=[attempt_from_row(row) for row in rows],
                history=[event_from_row(e) for e in events],
                rerun_of=rerun_of,
                reruns=later,
            )

        return await self._read(read)

    @schema_explained
    async def history(self, run_id: RunId, after_seq: int = 0) -> list[HistoryEvent]:
        """A run's history events after ``after_seq`` (at most 10,000; page on by seq).
        Raises ``RunNotFound`` for an unknown run (a run has at least one event, so
        only an empty page is checked)."""
        run_id = as_run_id(run_id)
        seq = check_after_seq(after_seq)
        shard = await self._shard_of(run_id)
        page = await self._read(lambda conn: run_events.history(conn, shard, run_id, seq))
        if not page and await self._read(lambda conn: runs.get(conn, shard, run_id)) is None:
            raise RunNotFound(f"no run {run_id}")
        return [event_from_row(row) for row in page]

    @schema_explained
    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | None = None,
        before: RunId | None = None,
        limit: int = 50,
        version: int | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        error_type: str | None = None,
        node: str | None = None,
    ) -> RunPage:
        """Runs newest first, filtered (``legato.RunFilter`` says what each criterion
        chooses), keyset-paginated by run id. Fan-out across shard keys: each page is
        one statement over every key, in run-id order."""
        check_limit(limit)
        chosen = bulk.run_filter(
            workflow=workflow,
            version=version,
            status=status,
            created_after=created_after,
            created_before=created_before,
            error_type=error_type,
            node=node,
        )
        after = None if before is None else as_run_id(before)
        page = await self._read(
            lambda conn: runs.list_runs(conn, chosen, before=after, limit=limit + 1)
        )
        more = len(page) > limit
        page = page[:limit]
        return RunPage(
            runs=[run_from_row(row) for row in page],
            next_before=page[-1].id if more and page else None,
        )
