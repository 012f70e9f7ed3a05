"""start(..., debounce=Debounce(...)): within a window only the last call's input runs,
race-free across tasks and clients; a started run is never touched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Debounce, InvalidArgument, Runtime
from tests.debounce_app import EXECUTED, Go, Note, app, digest, gated_digest
from tests.helpers import eventually
from tests.integration.test_shard_statements import Sent, _check, recorded


@pytest.fixture(autouse=True)
def _executed() -> Iterator[None]:
    EXECUTED.clear()
    yield
    EXECUTED.clear()


async def _runs(engine: AsyncEngine, workflow: str) -> list[tuple[uuid.UUID, object]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT id, input FROM legato.runs WHERE workflow_name = :w ORDER BY id"),
            {"w": workflow},
        )
        return [(row[0], row[1]) for row in rows]


async def test_concurrent_calls_of_one_window_run_once_with_the_last_input(
    engine: AsyncEngine,
) -> None:
    debounce = Debounce(key="cart:42", window=timedelta(milliseconds=300))
    clients = [Client(engine, app=app) for _ in range(3)]
    try:
        # No decider yet: however long the burst takes, the window's run stays pending.
        handles = await asyncio.gather(
            *(
                clients[i % 3].start(digest, Note(text=f"call-{i}"), debounce=debounce)
                for i in range(60)
            )
        )
        assert len({handle.run_id for handle in handles}) == 1
        [(run_id, stored)] = await _runs(engine, "digest")
        assert run_id == handles[0].run_id
        assert stored in [{"text": f"call-{i}"} for i in range(60)]

        last = await clients[0].start(digest, Note(text="last"), debounce=debounce)
        assert last.run_id == run_id
        async with Runtime(engine, app, poll_interval=0.1):
            assert await last.result(timeout=30) == "last"
            # The window closed with its run's start: the next call opens a new one.
            after = await clients[1].start(digest, Note(text="after"), debounce=debounce)
            assert after.run_id != run_id
            assert await after.result(timeout=30) == "after"
        assert EXECUTED == ["last", "after"]  # the replaced inputs never ran
        assert [input_ for _, input_ in await _runs(engine, "digest")] == [
            {"text": "last"},
            {"text": "after"},
        ]
    finally:
        for client in clients:
            await client.close()


async def test_a_started_run_is_not_affected(engine: AsyncEngine) -> None:
    debounce = Debounce(key="k", window=timedelta(milliseconds=100))
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        first = await client.start(gated_digest, Note(text="first"), debounce=debounce)

        async def waiting() -> bool:
            return any(e.type == "event_wait_started" for e in await client.history(first.run_id))

        await eventually(waiting, "the first run to be decided and wait for go")
        second = await client.start(gated_digest, Note(text="second"), debounce=debounce)
        assert second.run_id != first.run_id
        assert (await client.get_run(first.run_id)).run.input == {"text": "first"}
        for handle in (first, second):
            await client.signal(handle.run_id, "go", Go())
        assert await first.result(timeout=30) == "first"
        assert await second.result(timeout=30) == "second"


async def test_keys_and_workflows_have_windows_of_their_own(engine: AsyncEngine) -> None:
    window = timedelta(hours=1)
    async with Client(engine, app=app) as client:
        a = await client.start(digest, Note(text="a"), debounce=Debounce(key="a", window=window))
        b = await client.start(digest, Note(text="b"), debounce=Debounce(key="b", window=window))
        c = await client.start(
            gated_digest, Note(text="c"), debounce=Debounce(key="a", window=window)
        )
        by_name = await client.start(
            "digest", {"text": "a2"}, debounce=Debounce(key="a", window=window)
        )
    assert len({a.run_id, b.run_id, c.run_id}) == 3
    assert by_name.run_id == a.run_id
    assert {str(i) for i, _ in await _runs(engine, "digest")} == {str(a.run_id), str(b.run_id)}


async def test_each_call_pushes_the_start_back_within_max_wait(engine: AsyncEngine) -> None:
    debounce = Debounce(key="k", window=timedelta(minutes=10), max_wait=timedelta(minutes=15))
    async with Client(engine, app=app) as client:
        handle = await client.start(digest, Note(text="one"), debounce=debounce)

        async def due() -> tuple[float, float]:
            async with engine.connect() as conn:
                row = (
                    await conn.execute(
                        text(
                            "SELECT extract(epoch FROM r.scheduled_at - d.first_at), "
                            "extract(epoch FROM q.available_at - d.first_at) "
                            "FROM legato.runs r JOIN legato.decide_queue q ON q.run_id = r.id "
                            "JOIN legato.debounces d ON d.run_id = r.id WHERE r.id = :id"
                        ),
                        {"id": handle.run_id},
                    )
                ).one()
            return float(row[0]), float(row[1])

        first_scheduled, first_available = await due()
        assert 599 < first_scheduled == first_available < 601
        await client.start(digest, Note(text="two"), debounce=debounce)
        scheduled, available = await due()
        assert first_scheduled < scheduled == available <= 900


async def test_a_rolled_back_call_leaves_the_window_as_it_was(engine: AsyncEngine) -> None:
    debounce = Debounce(key="k", window=timedelta(hours=1))
    async with Client(engine, app=app) as client:
        handle = await client.start(digest, Note(text="kept"), debounce=debounce)
        async with engine.connect() as conn:
            transaction = await conn.begin()
            again = await client.start(
                digest, Note(text="rolled back"), debounce=debounce, connection=conn
            )
            await transaction.rollback()
        assert again.run_id == handle.run_id
        assert (await client.get_run(handle.run_id)).run.input == {"text": "kept"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"idempotency_key": "x"}, "takes no idempotency_key"),
        ({"start_at": "soon", "run_id": "x"}, "takes no run_id, start_at"),
        ({"debounce": "k"}, "debounce='k' must be a legato.Debounce"),
    ],
)
async def test_bad_debounced_starts_are_refused_and_write_nothing(
    engine: AsyncEngine, options: dict[str, object], message: str
) -> None:
    arguments: dict[str, object] = {"debounce": Debounce(key="k", window=timedelta(1)), **options}
    async with Client(engine, app=app) as client:
        with pytest.raises(InvalidArgument, match=message):
            await client.start(digest, Note(text="x"), **arguments)  # type: ignore[call-overload]
    assert await _runs(engine, "digest") == []


async def test_every_debounce_statement_touches_one_shard_key(engine: AsyncEngine) -> None:
    """In the distributed layout (the one that must route each statement to one key; on
    one PostgreSQL the loops' statements span the held keys by design)."""
    debounce = Debounce(key="tenant-7:digest", window=timedelta(milliseconds=100))
    with recorded(engine) as sent:
        async with Client(engine, app=app) as client:
            # Both calls before any decider runs: the second finds the run pending.
            first = await client.start(digest, Note(text="1"), debounce=debounce)
            replaced = await client.start(digest, Note(text="2"), debounce=debounce)
            assert replaced.run_id == first.run_id
            async with Runtime(engine, app, poll_interval=0.1, distributed=True):
                await first.result(timeout=30)
                reopened = await client.start(digest, Note(text="3"), debounce=debounce)
                await reopened.result(timeout=30)
    debounce_sql = [s for s in sent if "legato.debounces" in s.sql]
    assert len({s.sql for s in debounce_sql}) >= 2  # the claim and the reopen
    checked, failures = await _check(engine, [Sent(s.sql, s.params) for s in sent])
    assert checked >= 5
    assert not failures, "\n".join(failures)
