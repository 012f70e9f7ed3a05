"""Transactional tasks for the tests: writes into a user table in the user's own schema.

A victim process (``tests/e2e/txprocs.py --kill-at POINT``) sets ``VICTIM``; the tasks
then stop at that point, leave a marker naming the run, and hang, so the test can
``kill -9`` the process exactly there.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import BigInteger, Column, Identity, Integer, MetaData, Table, Text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato import App, Flow, Node, Retry, TaskContext, create_engine, task, workflow
from tests.helpers import write_whole

# The user's table, in the user's schema of Legato's database.
USER_SCHEMA = "shop"
metadata = MetaData(schema=USER_SCHEMA)
ledger = Table(
    "ledger",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("step", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
)

# The points a victim process can be killed at, in the order an attempt reaches them.
TRANSACTIONAL_POINTS = ("before_writes", "between_writes", "after_writes", "before_commit")
AFTER_COMMIT = "after_commit"
PLAIN_AFTER_WRITE = "plain_after_write"
LEDGER_URL_ENV = "LEGATO_TEST_LEDGER_URL"


@dataclass(frozen=True)
class Victim:
    point: str
    marker_dir: Path

    def mark(self, run_id: uuid.UUID) -> None:
        """Say which run reached the point (written whole: the test polls for it)."""
        write_whole(self.marker_dir / str(os.getpid()), f"{run_id} {self.point}")

    async def reached(self, point: str, run_id: uuid.UUID) -> None:
        if point == self.point:
            await asyncio.to_thread(self.mark, run_id)
            await asyncio.sleep(3600)

    def reached_blocking(self, point: str, run_id: uuid.UUID) -> None:
        """For a point outside any coroutine: freezes the whole process until killed."""
        if point == self.point:
            self.mark(run_id)
            time.sleep(3600)


VICTIM: Victim | None = None


async def reached(point: str, ctx: TaskContext) -> None:
    if VICTIM is not None:
        await VICTIM.reached(point, ctx.run_id)


async def _insert(conn: AsyncConnection, ctx: TaskContext, step: int) -> int:
    row = ledger.insert().values(run_id=str(ctx.run_id), step=step, attempt=ctx.attempt)
    return int((await conn.execute(row.returning(ledger.c.id))).scalar_one())


_QUICK_RETRY = Retry(attempts=3, backoff=timedelta(milliseconds=50))


@task(transactional=True, start_to_close=timedelta(seconds=30), retry=_QUICK_RETRY)
async def book(ctx: TaskContext, amount: int) -> int:
    """Two writes in the attempt's transaction; returns the first row's id."""
    await reached("before_writes", ctx)
    first = await _insert(ctx.connection, ctx, 1)
    await reached("between_writes", ctx)
    await _insert(ctx.connection, ctx, 2)
    await reached("after_writes", ctx)
    return first


_LEDGER_ENGINES: dict[str, AsyncEngine] = {}


@task(retry=_QUICK_RETRY)
async def book_plain(ctx: TaskContext, amount: int) -> int:
    """The same write through the task's own engine: it commits before the report."""
    url = os.environ[LEDGER_URL_ENV]
    engine = _LEDGER_ENGINES.setdefault(url, create_engine(url))
    async with engine.begin() as conn:
        first = await _insert(conn, ctx, 1)
    await reached(PLAIN_AFTER_WRITE, ctx)
    return first


async def dispose_ledger_engines() -> None:
    for engine in _LEDGER_ENGINES.values():
        await engine.dispose()
    _LEDGER_ENGINES.clear()


# In-process tests hold attempt 1 of ``held`` here: ``entered`` is set once its write is
# made, and it returns when ``release`` is set.
@dataclass
class Gate:
    entered: asyncio.Event
    release: asyncio.Event


GATES: dict[int, Gate] = {}


@task(transactional=True, start_to_close=timedelta(seconds=30), retry=_QUICK_RETRY)
async def held(ctx: TaskContext, amount: int) -> int:
    first = await _insert(ctx.connection, ctx, 1)
    gate = GATES.get(ctx.attempt)
    if gate is not None:
        gate.entered.set()
        await gate.release.wait()
    return first


@task(transactional=True, start_to_close=timedelta(seconds=30), retry=_QUICK_RETRY)
async def fails_once(ctx: TaskContext, amount: int) -> int:
    first = await _insert(ctx.connection, ctx, 1)
    if ctx.attempt == 1:
        raise RuntimeError("attempt 1 fails after its write")
    return first


@task(transactional=True, start_to_close=timedelta(seconds=30), retry=_QUICK_RETRY)
async def commits_itself(ctx: TaskContext, amount: int) -> int:
    first = await _insert(ctx.connection, ctx, 1)
    await ctx.connection.commit()
    return first


@task(retry=Retry(attempts=1))
async def not_transactional(ctx: TaskContext, amount: int) -> int:
    return await _insert(ctx.connection, ctx, 1)


@workflow("tx_book")
def book_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(book, flow.input)


@workflow("tx_book_plain")
def book_plain_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(book_plain, flow.input)


@workflow("tx_held")
def held_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(held, flow.input)


@workflow("tx_fails_once")
def fails_once_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(fails_once, flow.input)


@workflow("tx_commits_itself")
def commits_itself_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(commits_itself, flow.input)


@workflow("tx_not_transactional")
def not_transactional_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(not_transactional, flow.input)


app = App(
    workflows=[
        book_flow,
        book_plain_flow,
        held_flow,
        fails_once_flow,
        commits_itself_flow,
        not_transactional_flow,
    ]
)
