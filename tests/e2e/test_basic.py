from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFinished, RunStatus, Runtime
from tests.e2e.flows import Active, Confirmed, Signup, app, chain, signup
from tests.helpers import eventually


async def test_chain_of_three_tasks(runtime: Runtime, client: Client) -> None:
    handle = await client.start(chain, 4)
    assert await handle.result(timeout=20) == 11
    details = await client.get_run(handle.run_id)
    assert details.run.status is RunStatus.SUCCEEDED
    assert sorted(t.task_name or "" for t in details.tasks) == ["add_one", "add_one", "double"]
    assert all(t.state == "COMPLETED" and t.attempt == 1 for t in details.tasks)
    assert details.history[0].type == "run_started"
    assert [e.seq for e in details.history] == list(range(1, len(details.history) + 1))


async def test_signup_waits_for_the_event(runtime: Runtime, client: Client) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
    assert await handle.result(timeout=20) == Active(user_id="ada", code="c0de")
    details = await client.get_run(handle.run_id)
    recorded = [(e.type, e.node_id) for e in details.history]
    assert recorded.count(("event_received", "signup.confirmed")) == 1, recorded
    assert ("task_completed", "signup.confirmed") not in recorded, recorded  # seen as received
    assert len(set(recorded)) == len(recorded), recorded  # nothing recorded twice
    assert all(t.observed for t in details.tasks)
    # The client remembers the run's workflow, but not that the run is still running.
    with pytest.raises(RunFinished, match="already SUCCEEDED"):
        await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="late"))


async def test_a_start_time_delays_the_first_decision(runtime: Runtime, client: Client) -> None:
    began = datetime.now(UTC)
    delay = timedelta(seconds=5)  # long enough that a loaded machine still looks in time
    takes = sum(loop.takes for loop in runtime.decider_loops)
    handle = await client.start(chain, 1, start_at=began + delay)
    # The start's wake-up made a decider take from the run's key: it found nothing due.
    await eventually(
        lambda: sum(loop.takes for loop in runtime.decider_loops) > takes,
        "a decider's take after the start",
    )
    looked = datetime.now(UTC)
    details = await client.get_run(handle.run_id)
    if looked < began + delay:
        assert details.tasks == []
    assert await handle.result(timeout=30) == 5
    first = min(t.created_at for t in (await client.get_run(handle.run_id)).tasks)
    assert first >= began + delay


async def test_list_runs_filters_and_pages_newest_first(client: Client) -> None:
    started = [(await client.start(chain, n)).run_id for n in range(5)]
    await client.start(signup, Signup(email="x@y"))
    first = await client.list_runs(workflow="chain", limit=2)
    assert [r.id for r in first.runs] == started[::-1][:2]
    assert first.next_before == started[3]
    second = await client.list_runs(workflow="chain", limit=2, before=first.next_before)
    assert [r.id for r in second.runs] == started[::-1][2:4]
    last = await client.list_runs(workflow="chain", limit=2, before=second.next_before)
    assert [r.id for r in last.runs] == [started[0]]
    assert last.next_before is None
    running = await client.list_runs(status=RunStatus.RUNNING, limit=100)
    assert len(running.runs) == 6


async def test_a_burst_is_decided_by_both_decider_loops(
    engine: AsyncEngine, client: Client
) -> None:
    # poll_interval is long: once idle, only the LISTENing loop hears of new runs, and
    # the second loop can only be woken by its nudge.
    async with Runtime(engine, app, poll_interval=30.0, decide_batch_size=50) as runtime:
        first, second = runtime.decider_loops
        await asyncio.sleep(0.5)  # both loops have polled once and sleep
        handles = await client.start_many(chain, list(range(300)))
        results = [await h.result(timeout=60) for h in handles]
    assert results == [2 * (n + 1) + 1 for n in range(300)]
    assert first.decided > 0 and second.decided > 0, (first.decided, second.decided)
