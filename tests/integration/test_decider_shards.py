"""The decider loop takes only from the keys it holds and, woken by a decide NOTIFY,
only from the key the notification names: in the distributed layout one take per key,
on one PostgreSQL one take spanning the keys (never a run of a key it does not hold)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.engine.transport.wakeups import Wakeups, payload_shard
from legato.schema import DEFAULT_SHARD_COUNT, DecideQueue, Shards, Tasks
from tests.helpers import eventually

shards = Shards(DEFAULT_SHARD_COUNT)
LAYOUTS = [Shards(DEFAULT_SHARD_COUNT, distributed=True), shards]
LAYOUT_IDS = ["distributed", "single-node"]


@workflow("parked")
def parked(flow: Flow[str]) -> Node[str]:
    return flow.wait_for_event("go", str)


app = App(workflows=[parked])


class Only:
    """A decider that holds just ``keys``."""

    def __init__(self, *keys: int) -> None:
        self.keys = keys

    def held(self) -> Sequence[int]:
        return self.keys


async def _start_in(client: Client, keys: Sequence[int]) -> dict[int, uuid.UUID]:
    started = {}
    for key in keys:
        handle = await client.start(parked, f"key {key}", run_id=shards.new_run_id(key))
        started[key] = handle.run_id
    return started


async def _decided(engine: AsyncEngine) -> set[uuid.UUID]:
    """The runs a decision has seen: each opened its wait."""
    async with engine.connect() as conn:
        return set((await conn.execute(select(Tasks.run_id))).scalars())


async def _queued(engine: AsyncEngine) -> set[uuid.UUID]:
    async with engine.connect() as conn:
        return set((await conn.execute(select(DecideQueue.run_id))).scalars())


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
async def test_a_decider_takes_only_from_the_keys_it_holds(
    engine: AsyncEngine, layout: Shards
) -> None:
    async with Client(engine, app=app) as client:
        started = await _start_in(client, [0, 1, 2])
        partial = DeciderLoop(engine, shards=layout, held=Only(0, 1))
        for _ in range(3):
            await partial.tick()
        assert await _decided(engine) == {started[0], started[1]}
        assert await _queued(engine) == {started[2]}
        partial.decide_now([2])  # a NOTIFY of a key it does not hold changes nothing
        await partial.tick()
        assert await _decided(engine) == {started[0], started[1]}

        every = await _start_in(client, list(shards.all()))
        whole = DeciderLoop(engine, shards=layout)
        await whole.tick()
    assert await _decided(engine) == {*started.values(), *every.values()}
    assert await _queued(engine) == set()
    # One take per key, or one take for every key on one PostgreSQL.
    assert whole.takes == (shards.count if layout.distributed else 1)


class Sibling(DeciderLoop):
    """A sibling decider loop that records the keys it is asked to take from."""

    def __init__(self, engine: AsyncEngine, layout: Shards) -> None:
        super().__init__(engine, shards=layout)
        self.asked: list[list[int]] = []

    def decide_now(self, shards: Iterable[int] | None = None) -> None:
        self.asked.append(list(self.held.held() if shards is None else shards))
        super().decide_now(shards)


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
async def test_a_backlog_wakes_the_sibling_loop(engine: AsyncEngine, layout: Shards) -> None:
    """On one PostgreSQL a take of more than one run wakes the process's other decider
    loop on the same keys, so it takes the next batch while the first waits on
    PostgreSQL; a take of one run does not. In the distributed layout the tick splits
    the keys between the loops instead, and only a full take calls the sibling onto a
    key of its own."""
    async with Client(engine, app=app) as client:
        for _ in range(2):
            await client.start(parked, "two in key 3", run_id=shards.new_run_id(3))
        sibling = Sibling(engine, layout)
        first = DeciderLoop(engine, shards=layout, helper=sibling, poll_interval=600)
        await first.tick()
        assert first.decided == 2
        if layout.distributed:
            assert [3 in keys for keys in sibling.asked] == [False]  # the other half
        else:
            assert [3 in keys for keys in sibling.asked] == [True]
        await client.start(parked, "one in key 3", run_id=shards.new_run_id(3))
        sibling.asked.clear()
        first.decide_now([3])
        await first.tick()
        assert first.decided == 3
        assert sibling.asked == []


@contextmanager
def takes(engine: AsyncEngine) -> Iterator[list[str]]:
    """The decide_queue takes ``engine`` sends inside the block (a statement of its own,
    or the single-node call that also locks and reads)."""
    sent: list[str] = []

    def statement(_conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        if "DELETE FROM legato.decide_queue" in text or "decider_take_v2" in text:
            sent.append(text)

    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", statement)


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
async def test_a_wake_for_one_key_is_one_take(engine: AsyncEngine, layout: Shards) -> None:
    """A start NOTIFYs the decide channel with its run's key: the woken decider takes
    from that key alone (not from all sixteen), and decides the run."""
    wakeups = Wakeups(engine)
    decider = DeciderLoop(engine, shards=layout, wakeups=wakeups, poll_interval=600)
    running = asyncio.create_task(decider.run())
    first_poll = shards.count if layout.distributed else 1
    try:
        await eventually(lambda: decider.takes >= first_poll, "the first poll of every key")
        async with Client(engine, app=app) as client:
            with takes(engine) as sent:
                (run_id,) = (await _start_in(client, [5])).values()
                await eventually(
                    lambda: _has_decided(engine, run_id), "the decision of the started run"
                )
                await asyncio.sleep(0.3)  # no take of another key follows
        assert len(sent) == 1, sent
        assert decider.decided == 1
    finally:
        decider.stop()
        await running
        await wakeups.close()


async def _has_decided(engine: AsyncEngine, run_id: uuid.UUID) -> bool:
    return run_id in await _decided(engine)


def test_the_payload_names_a_key() -> None:
    assert payload_shard("7") == 7
    assert payload_shard(" 12 ") == 12
    assert payload_shard("") is None
    assert payload_shard("-1") is None
    assert payload_shard("x") is None
    assert payload_shard("٣") is None  # digits of another script are not a key


async def test_a_row_stamped_below_the_floor_waits_for_the_next_take_from_the_oldest_row(
    engine: AsyncEngine,
) -> None:
    """A single-node take, and the sleep gate's look for due work, start just before the
    oldest row the decider last took (so they do not walk the dead rows a held snapshot
    keeps below it). A row stamped earlier (a start committed by a long transaction) is
    missed by them, and taken by the take from the oldest row the decider makes once per
    poll interval."""
    decider = DeciderLoop(engine, shards=shards, poll_interval=600)
    async with Client(engine, app=app) as client:
        first = await _start_in(client, [3])
        assert await decider.tick() is False  # from the oldest row: taken, then asleep
        assert await _decided(engine) == set(first.values())
        (late,) = (await _start_in(client, [3])).values()
        async with engine.begin() as conn:
            await conn.execute(
                update(DecideQueue.table)
                .where(DecideQueue.run_id == late)
                .values(available_at=func.now() - timedelta(minutes=1))
            )
        decider.decide_now([3])  # its NOTIFY
        assert await decider.tick() is False  # from the floor: missed, and asleep
        assert late not in await _decided(engine)
        decider.poll_interval = 0  # a poll interval has passed
        await decider.tick()
        assert late in await _decided(engine)
    assert decider.takes == 3


async def test_a_distributed_take_starts_at_its_keys_floor(engine: AsyncEngine) -> None:
    """In the distributed layout each key's take starts just before the oldest row that
    key's last take returned: a row of key 3 stamped earlier is missed until a poll
    interval has passed, then taken from the oldest row; key 5's first take, which has
    no floor yet, takes its own early row at once."""
    layout = Shards(DEFAULT_SHARD_COUNT, distributed=True)
    decider = DeciderLoop(engine, shards=layout, poll_interval=600)

    async def backdated(key: int) -> uuid.UUID:
        (run_id,) = (await _start_in(client, [key])).values()
        async with engine.begin() as conn:
            await conn.execute(
                update(DecideQueue.table)
                .where(DecideQueue.run_id == run_id)
                .values(available_at=func.now() - timedelta(minutes=1))
            )
        return run_id

    async with Client(engine, app=app) as client:
        first = await _start_in(client, [3])
        decider.decide_now([3])
        await decider.tick()
        assert await _decided(engine) == set(first.values())
        late, other = await backdated(3), await backdated(5)
        decider.decide_now([3, 5])
        await decider.tick()
        decided = await _decided(engine)
        assert late not in decided and other in decided
        decider.poll_interval = 0  # a poll interval has passed
        decider.decide_now([3])
        await decider.tick()
        assert late in await _decided(engine)
