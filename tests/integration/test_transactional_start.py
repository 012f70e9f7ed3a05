"""start(connection=...) writes in the caller's transaction: commit starts, rollback undoes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from examples.signup import Signup, app, signup
from legato import Client, InvalidInput, RunNotFound, RunStatus
from legato.db.urls import resolve_url
from legato.engine.repositories import decider_sleep
from legato.engine.repositories.decider_sleep import Settled

# The user's own table, in the user's schema: their engine knows nothing of Legato's.
_metadata = MetaData()
accounts = Table(
    "accounts", _metadata, Column("id", Integer, primary_key=True), Column("email", Text)
)


@pytest.fixture
async def user_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    user = create_async_engine(resolve_url(database_url))
    async with user.begin() as conn:
        await conn.run_sync(_metadata.create_all)
    yield user
    await user.dispose()


async def _count_runs(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM legato.runs"))).scalar_one())


class _Listener:
    """A raw LISTEN on the deciders' channel, collecting payloads in arrival order."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.arrived = asyncio.Event()

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self.arrived.set()

    async def until(self, payload: str) -> None:
        while payload not in self.payloads:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), timeout=10)


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[_Listener]:
    collected = _Listener()
    raw = await asyncpg.connect(
        resolve_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    await raw.add_listener("legato_decide_v1", collected)
    try:
        yield collected
    finally:
        await raw.close()


async def test_a_rolled_back_start_leaves_no_run_and_no_notify(
    engine: AsyncEngine, user_engine: AsyncEngine, listener: _Listener
) -> None:
    async with Client(engine) as client:
        async with user_engine.connect() as conn:
            transaction = await conn.begin()
            await conn.execute(accounts.insert().values(id=1, email="ada@example.com"))
            handle = await client.start(
                signup,
                Signup(email="ada@example.com"),
                connection=conn,
                idempotency_key="signup:ada",
            )
            await transaction.rollback()
        with pytest.raises(RunNotFound):
            await client.get_run(handle.run_id)
        assert await _count_runs(engine) == 0

        # Notifications arrive in commit order: a sentinel committed after the
        # rollback would be preceded by the rolled-back start's NOTIFY had it fired.
        async with engine.begin() as conn:
            await conn.execute(select(func.pg_notify("legato_decide_v1", "sentinel")))
        await listener.until("sentinel")
        assert listener.payloads == ["sentinel"]

        # The idempotency key went with the transaction: the same key starts anew.
        again = await client.start(
            signup, Signup(email="ada@example.com"), idempotency_key="signup:ada"
        )
        assert again.run_id != handle.run_id


async def test_a_committed_start_exists_with_the_callers_rows_and_wakes_the_deciders(
    engine: AsyncEngine, user_engine: AsyncEngine, listener: _Listener
) -> None:
    async with Client(engine) as client:
        async with engine.connect() as sleeper:  # a decider asleep: the start must wake it
            autocommit = await sleeper.execution_options(isolation_level="AUTOCOMMIT")
            keys = (await client.shards()).all()
            assert await decider_sleep.settle(autocommit, keys) is Settled.ASLEEP
        async with user_engine.begin() as conn:
            await conn.execute(accounts.insert().values(id=1, email="ada@example.com"))
            handle = await client.start(signup, Signup(email="ada@example.com"), connection=conn)
            many = await client.start_many(
                signup,
                [Signup(email="b@example.com"), Signup(email="c@example.com")],
                connection=conn,
            )
            # Not visible to anyone else before the caller commits.
            assert await _count_runs(engine) == 0
            # The caller's connection is left as it was: its own tables still resolve.
            assert conn.sync_connection is not None
            options = conn.sync_connection.get_execution_options()
            assert options.get("schema_translate_map") is None
        # The deciders are woken with the key of the run's decide row.
        await listener.until(str((await client.shards()).of_run(handle.run_id)))
        details = await client.get_run(handle.run_id)
        assert details.run.status is RunStatus.RUNNING
        assert details.run.input == {"email": "ada@example.com"}
        for other in many:
            assert (await client.get_run(other.run_id)).run.workflow_name == "signup"
        async with user_engine.connect() as conn:
            emails = (await conn.execute(select(accounts.c.email))).scalars().all()
        assert emails == ["ada@example.com"]


async def test_a_caller_transaction_start_with_bad_input_writes_nothing(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with Client(engine, app=app) as client, user_engine.begin() as conn:
        with pytest.raises(InvalidInput, match="email"):
            await client.start("signup", {"mail": "x"}, connection=conn)
        assert (await conn.execute(text("SELECT count(*) FROM legato.runs"))).scalar_one() == 0


async def test_a_start_by_name_runs_in_the_callers_transaction_too(
    engine: AsyncEngine, user_engine: AsyncEngine
) -> None:
    async with Client(engine) as client:
        await client.deploy(app)
        async with user_engine.connect() as conn:
            transaction = await conn.begin()
            handle = await client.start("signup", {"email": "a@b.c"}, connection=conn)
            await transaction.rollback()
        with pytest.raises(RunNotFound):
            await client.get_run(handle.run_id)
