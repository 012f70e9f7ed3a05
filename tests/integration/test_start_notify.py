"""What a start, a scheduled start and a decision batch NOTIFY (migration 0016): a start
wakes the deciders once and no live tail, a start due later wakes no one, and a
statement appending history for many runs sends one notification per hundred runs."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, TaskContext, task, workflow
from legato.db.schema_names import engine_schema
from legato.engine.repositories import notify, run_events
from legato.engine.transport.wakeups import Wakeups
from tests.helpers import eventually


@task()
async def echo(ctx: TaskContext, value: int) -> int:
    return value


@workflow("notified")
def echoed(flow: Flow[int]) -> Node[int]:
    return flow.run(echo, flow.input)


class Heard:
    """Every notification on the schema's decide, tasks and events channels, in order;
    ``settled`` waits for a sentinel sent after the commits under test, which the server
    delivers after their notifications (a listener gets them in commit order)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.schema = engine_schema(engine, "the test")
        self.wakeups = Wakeups(engine)
        self.got: list[tuple[str, str]] = []
        self.sentinel = f"{self.schema}_test_sentinel"

    async def __aenter__(self) -> Heard:
        for channel in (
            notify.decide_channel(self.schema),
            notify.tasks_channel(self.schema),
            notify.events_channel(self.schema),
            self.sentinel,
        ):
            await self.wakeups.subscribe(channel, self._heard(channel))
        return self

    def _heard(self, channel: str) -> Callable[[str], None]:
        return lambda payload: self.got.append((channel, payload))

    async def __aexit__(self, *_: object) -> None:
        await self.wakeups.close()

    async def settled(self) -> list[tuple[str, str]]:
        """The notifications of everything committed before this call, then cleared."""
        mark = uuid.uuid4().hex
        async with self.engine.begin() as conn:
            await conn.execute(select(func.pg_notify(self.sentinel, mark)))
        await eventually(lambda: (self.sentinel, mark) in self.got, "the sentinel")
        heard = self.got[: self.got.index((self.sentinel, mark))]
        del self.got[:]
        return heard


async def test_a_start_wakes_the_deciders_once_and_a_start_due_later_wakes_no_one(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=App([echoed])) as client, Heard(engine) as heard:
        await client.deploy()
        await heard.settled()
        handle = await client.start(echoed, 1)
        shard = (await client.shards()).of_run(handle.run_id)
        assert await heard.settled() == [(notify.decide_channel(heard.schema), str(shard))]

        await client.start(echoed, 2, start_at=datetime.now(UTC) + timedelta(hours=1))
        assert await heard.settled() == []


async def test_history_for_many_runs_is_one_notification_per_hundred_runs(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=App([echoed])) as client, Heard(engine) as heard:
        await client.deploy()
        shards = await client.shards()
        handles = await client.start_many(echoed, list(range(150)), shard_key="tenant")
        shard = shards.of_run(handles[0].run_id)
        await heard.settled()
        events = [
            run_events.NewEvent(h.run_id, 2, "test_event", None, None, None, None) for h in handles
        ]
        async with engine.begin() as conn:
            await conn.execute(run_events.appended(), run_events.appended_params(shard, events))
        heard_events = await heard.settled()
        assert [channel for channel, _ in heard_events] == [notify.events_channel(heard.schema)] * 2
        named = [run for _, payload in heard_events for run in notify.event_runs(payload)]
        assert sorted(named) == sorted(str(h.run_id) for h in handles)
        assert all(payload.count(":2") == len(payload.split()) for _, payload in heard_events)
