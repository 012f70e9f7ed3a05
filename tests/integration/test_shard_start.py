"""Starting, signalling and listing runs by shard key (``Client.start(shard_key=...)``):
a run and every row of it live in the key its id carries; a tenant key, an idempotency
key, a given run id and a batch each pick or honour that key; listing pages over every
key in id order."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    Flow,
    InvalidArgument,
    Node,
    TaskContext,
    migrations,
    task,
    uuid7,
    workflow,
)
from legato.db import create_engine
from legato.schema import DecideQueue, IdempotencyKeys, RunEvents, Runs, Shards, Signals
from tests.helpers import count_rows


@task()
async def noop(ctx: TaskContext, n: int) -> int:
    return n


@workflow("shard.one")
def one(flow: Flow[int]) -> Node[int]:
    return flow.run(noop, flow.input)


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    # Made from an engine, not connect(): the keys are read on first use.
    async with Client(engine, app=App([one])) as client:
        yield client


async def _keys(engine: AsyncEngine, table: Any, id_column: Any) -> dict[uuid.UUID, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(id_column, table.c.shard))
        return {row[0]: row[1] for row in rows}


async def _every_row_in_its_key(engine: AsyncEngine, shards: Shards, ids: list[uuid.UUID]) -> None:
    for table, column in (
        (Runs.table, Runs.id),
        (RunEvents.table, RunEvents.run_id),
        (DecideQueue.table, DecideQueue.run_id),
    ):
        keys = await _keys(engine, table, column)
        assert {i: keys[i] for i in ids} == {i: shards.of_run(i) for i in ids}, table.name


@contextmanager
def _statements(engine: AsyncEngine) -> Iterator[list[str]]:
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        sent.append(sql)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def test_connect_reads_the_installations_keys(database_url: str) -> None:
    async with await Client.connect(database_url) as client:
        assert client._shards is not None
        assert await client.shards() == Shards(16)


async def test_a_tenant_key_puts_runs_in_one_key(client: Client, engine: AsyncEngine) -> None:
    shards = await client.shards()
    first = await client.start(one, 1, shard_key="tenant-acme")
    second = await client.start(one, 2, shard_key="tenant-acme")
    key = shards.of_key("tenant-acme")
    assert shards.of_run(first.run_id) == shards.of_run(second.run_id) == key
    assert first.run_id != second.run_id
    await _every_row_in_its_key(engine, shards, [first.run_id, second.run_id])
    # A start by name (no driver path) honours the key too.
    await client.deploy(App([one]))
    third = await client.start("shard.one", 3, shard_key="tenant-acme")
    assert shards.of_run(third.run_id) == key


async def test_an_idempotent_retry_with_a_key_returns_the_same_run(
    client: Client, engine: AsyncEngine
) -> None:
    shards = await client.shards()
    first = await client.start(one, 1, idempotency_key="order-1", shard_key="tenant-b")
    again = await client.start(one, 1, idempotency_key="order-1", shard_key="tenant-b")
    assert again.run_id == first.run_id
    assert shards.of_run(first.run_id) == shards.of_key("tenant-b")
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(IdempotencyKeys.shard, IdempotencyKeys.run_id))).all()
    assert tuple(row) == (shards.of_key("tenant-b"), first.run_id)
    assert await count_rows(engine, Runs) == 1


async def test_an_idempotency_key_alone_picks_its_own_key(
    client: Client, engine: AsyncEngine
) -> None:
    shards = await client.shards()
    first = await client.start(one, 1, idempotency_key="signup:ada")
    again = await client.start(one, 1, idempotency_key="signup:ada")
    assert again.run_id == first.run_id
    assert shards.of_run(first.run_id) == shards.of_key("signup:ada")
    assert await count_rows(engine, Runs) == 1


async def test_a_run_id_in_another_key_is_refused_with_nothing_written(
    client: Client, engine: AsyncEngine
) -> None:
    shards = await client.shards()
    key = shards.of_key("tenant-c")
    wrong = shards.with_shard(uuid7(), (key + 1) % shards.count)
    with pytest.raises(InvalidArgument, match=r"shard_key='tenant-c'.*omit run_id") as caught:
        await client.start(one, 1, run_id=wrong, shard_key="tenant-c")
    assert str(wrong) in str(caught.value)
    with pytest.raises(InvalidArgument, match="idempotency_key='k'"):
        await client.start(
            one,
            1,
            run_id=shards.with_shard(uuid7(), (shards.of_key("k") + 1) % 16),
            idempotency_key="k",
        )
    for table in (Runs, RunEvents, DecideQueue, IdempotencyKeys):
        assert await count_rows(engine, table) == 0, table.table.name
    # A run id made in the key is taken as given.
    right = shards.new_run_id(key)
    handle = await client.start(one, 1, run_id=right, shard_key="tenant-c")
    assert handle.run_id == right


async def test_a_batch_across_keys_writes_every_run(client: Client, engine: AsyncEngine) -> None:
    shards = await client.shards()
    handles = await client.start_many(one, list(range(64)))
    ids = [h.run_id for h in handles]
    assert len(set(ids)) == 64
    assert len({shards.of_run(i) for i in ids}) > 1
    assert await count_rows(engine, Runs) == 64
    await _every_row_in_its_key(engine, shards, ids)


@pytest.mark.parametrize("tenant", [None, "tenant-d"], ids=["across keys", "one tenant's key"])
async def test_a_batch_is_one_start_statement_on_one_postgresql(
    client: Client, engine: AsyncEngine, tenant: str | None
) -> None:
    """The single-node layout: across keys, the rows take their keys from their ids in
    the statement; with a tenant key, all are in that key."""
    await client.start_many(one, [0])  # stores the spec
    shards = await client.shards()
    with _statements(engine) as sent:
        handles = await client.start_many(one, list(range(40)), shard_key=tenant)
    ids = [h.run_id for h in handles]
    keys = {shards.of_run(i) for i in ids}
    if tenant is None:
        assert len(keys) > 1
    else:
        assert keys == {shards.of_key(tenant)}
    assert len([sql for sql in sent if "INSERT INTO" in sql]) == 1
    await _every_row_in_its_key(engine, shards, ids)


async def test_list_runs_pages_across_keys_in_id_order(client: Client) -> None:
    shards = await client.shards()
    started = [(await client.start(one, n, shard_key=f"tenant-{n % 5}")).run_id for n in range(9)]
    assert len({shards.of_run(i) for i in started}) > 1
    seen: list[uuid.UUID] = []
    before = None
    while True:
        page = await client.list_runs(limit=4, before=before)
        seen += [run.id for run in page.runs]
        if page.next_before is None:
            break
        before = page.next_before
    assert seen == sorted(started, reverse=True)


async def test_a_signal_lands_in_its_runs_key(client: Client, engine: AsyncEngine) -> None:
    shards = await client.shards()
    handle = await client.start(one, 1, shard_key="tenant-e")
    bare = Client(engine)  # no app: the signal is one statement, no read first
    try:
        await bare.signal(handle.run_id, "poke", {"n": 1})
    finally:
        await bare.close()
    keys = await _keys(engine, Signals.table, Signals.run_id)
    assert keys == {handle.run_id: shards.of_key("tenant-e")}
    history = await client.history(handle.run_id)
    assert [e.type for e in history] == ["run_started"]


async def test_a_schema_made_with_four_keys_starts_runs_in_them(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        await migrations.upgrade(engine, "legato", shard_count=4)
        async with Client(engine) as client:
            assert await client.shards() == Shards(4)
            handles = await client.start_many(one, list(range(16)))
            keyed = await client.start(one, 1, shard_key="tenant-f")
        keys = await _keys(engine, Runs.table, Runs.id)
        assert set(keys.values()) <= {0, 1, 2, 3}
        assert keys[keyed.run_id] == Shards(4).of_key("tenant-f")
        assert all(keys[h.run_id] == Shards(4).of_run(h.run_id) for h in handles)
    finally:
        await engine.dispose()
