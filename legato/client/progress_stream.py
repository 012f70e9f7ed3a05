"""``Client.stream``: a run's progress entries (``ctx.progress`` / ``ctx.stream``) after a
cursor, then each new one as it is written, until the run has finished.

Woken by the NOTIFY each entry sends on the history channel (``<run_id>:progress``) and
by the run's history events, reading every ``poll_interval`` seconds too in case one is
lost. The run's status is read *before* each read of entries: once a read that began
after the run finished has returned, no entry is left to come (a finished run's
attempts write no more), so the stream ends without missing the last ones.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from functools import partial

from sqlalchemy.exc import DBAPIError

from legato.arguments import RunId, as_run_id, check_after_seq
from legato.client.reads import RunReads
from legato.engine.repositories import progress, runs
from legato.errors import RunNotFound
from legato.progress import ProgressEntry
from legato.run_wakeups import woken

# Entries per read: a long backlog is read page by page.
PAGE = 1_000


async def stream(
    client: RunReads, run_id: RunId, after: int
) -> AsyncGenerator[ProgressEntry, None]:
    """The entries of ``run_id`` after seq ``after`` until the run has finished;
    ``RunNotFound`` before yielding anything for an unknown run."""
    entries = _stream(client, run_id, after)
    try:
        async for entry in entries:
            yield entry
    except DBAPIError as error:
        await client._explain(error)
        raise
    finally:
        await entries.aclose()


async def _stream(
    client: RunReads, run_id: RunId, after: int
) -> AsyncGenerator[ProgressEntry, None]:
    run_id = as_run_id(run_id)
    seq = check_after_seq(after, "after")
    shard = await client._shard_of(run_id)
    if await client._read(lambda conn: runs.get(conn, shard, run_id)) is None:
        raise RunNotFound(f"no run {run_id}")
    async with client._wakeups.watching(run_id) as wake:
        while True:
            wake.clear()
            finished = await client._finished(run_id) is not None
            while True:
                page = await client._read(
                    partial(progress.after, shard=shard, run_id=run_id, after_seq=seq, limit=PAGE)
                )
                for entry in page:
                    yield entry
                    seq = entry.seq
                if len(page) < PAGE:
                    break
            if finished:
                return
            if not await woken(wake, client.poll_interval):
                await client._wakeups.relisten()
