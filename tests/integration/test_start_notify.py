"""What a start, a scheduled start and a decision batch NOTIFY (migrations 0016, 0018): a
start wakes a sleeping decider once and no live tail, a start while no decider sleeps or
due later wakes no one, and a statement appending history for many runs sends one
notification per hundred runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, TaskContext, task, workflow
from legato.engine.repositories import decide_queue, decider_sleep, notify, run_events
from legato.engine.repositories.decider_sleep import Settled
from tests.integration.notifications import Heard


@task()
async def echo(ctx: TaskContext, value: int) -> int:
    return value


@workflow("notified")
def echoed(flow: Flow[int]) -> Node[int]:
    return flow.run(echo, flow.input)


async def test_a_start_wakes_a_sleeping_decider_once_and_no_one_else(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=App([echoed])) as client, Heard(engine) as heard:
        await client.deploy()
        shards = await client.shards()
        await heard.settled()
        await client.start(echoed, 0)
        assert await heard.settled() == [], "no decider sleeps: no NOTIFY"

        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            assert await decider_sleep.settle(autocommit, shards.all()) is Settled.WORK
            await decide_queue.take_held(autocommit, shards.all(), shards.count, 10)
            assert await decider_sleep.settle(autocommit, shards.all()) is Settled.ASLEEP
        await client.start(echoed, 1, shard_key="tenant")
        shard = shards.of_key("tenant")
        assert await heard.settled() == [(notify.decide_channel(heard.schema), str(shard))]
        await client.start(echoed, 2, shard_key="tenant")
        assert await heard.settled() == [], "the first start cleared the key's flag"

        # Every other key's flag is still set, and a start due later wakes no one.
        await client.start(echoed, 3, start_at=datetime.now(UTC) + timedelta(hours=1))
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
