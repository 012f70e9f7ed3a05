"""What the client hands back: public read models, a structured ``RunFailed``, a live
``follow()`` and a ``result()`` woken by NOTIFY rather than by polling."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

import legato
from legato import (
    App,
    Client,
    Flow,
    Node,
    Retry,
    RunFailed,
    RunStatus,
    Runtime,
    TaskContext,
    TaskState,
    create_engine,
    task,
    workflow,
)
from tests.e2e import flows
from tests.e2e.flows import Confirmed, Signup
from tests.helpers import eventually

# Long enough that a wait relying on the poll could not finish inside the test's timeouts.
NEVER = 3600.0


@task(start_to_close=timedelta(milliseconds=200), retry=Retry(attempts=1))
async def hangs(ctx: TaskContext, value: int) -> int:
    await asyncio.sleep(60)
    return value


@workflow("hanging")
def hanging(flow: Flow[int]) -> Node[int]:
    return flow.run(hangs, flow.input)


app = App(workflows=[*flows.app.workflows.values(), hanging])


@pytest_asyncio.fixture
async def runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    rt = Runtime(engine, app, poll_interval=0.2, grace_period=0.5)
    await rt.start()
    yield rt
    await rt.stop()


@pytest_asyncio.fixture
async def client_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The client's own engine, so its statements can be counted apart from the loops'."""
    engine = create_engine(database_url, "legato")
    yield engine
    await engine.dispose()


def count_run_reads(engine: AsyncEngine) -> list[str]:
    """Every statement ``engine`` sends that reads the ``runs`` table, as it is sent."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if re.search(r"\bFROM \S*\bruns\b", statement):
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    return seen


async def test_the_read_api_returns_the_public_types(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.chain, 1)
    await handle.result(timeout=20)
    details = await client.get_run(handle.run_id)
    assert type(details) is legato.RunDetails
    assert type(details.run) is legato.Run and details.run.id == handle.run_id
    assert details.tasks and all(type(t) is legato.Attempt for t in details.tasks)
    assert {t.kind for t in details.tasks} == {legato.NodeKind.TASK}
    assert details.history and all(type(e) is legato.HistoryEvent for e in details.history)
    assert [type(e) for e in await client.history(handle.run_id, 1)] == [legato.HistoryEvent] * (
        len(details.history) - 1
    )
    page = await client.list_runs(workflow="chain")
    assert type(page) is legato.RunPage and [type(r) for r in page.runs] == [legato.Run]


async def test_run_failed_names_the_failed_task(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.compensated, 7)
    with pytest.raises(RunFailed) as caught:
        await handle.result(timeout=20)
    failed = caught.value
    assert (failed.run_id, failed.status) == (handle.run_id, RunStatus.FAILED)
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("Broken", "cannot handle 7")
    assert (failed.error.node_id, failed.error.iteration, failed.error.attempt) == ("broken", 0, 1)
    assert failed.error.state is TaskState.FAILED and not failed.error.retryable
    assert "Broken: cannot handle 7 (node 'broken', attempt 1)" in str(failed)


async def test_run_failed_tells_a_task_timeout_apart(runtime: Runtime, client: Client) -> None:
    handle = await client.start(hanging, 1)
    with pytest.raises(RunFailed) as caught:
        await handle.result(timeout=20)
    error = caught.value.error
    assert caught.value.status is RunStatus.FAILED and error is not None
    assert (error.node_id, error.attempt, error.state) == ("hangs", 1, TaskState.TIMED_OUT)
    assert error.type == "Timeout"


async def test_run_failed_of_an_event_wait_that_timed_out(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.strict_approval, "x")
    with pytest.raises(RunFailed) as caught:
        await handle.result(timeout=20)
    error = caught.value.error
    assert error is not None and error.state is TaskState.TIMED_OUT
    assert error.node_id == "approval" and error.attempt == 1


async def test_run_failed_of_a_cancelled_run(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.endless, "x")
    await eventually(lambda: "forever x started" in flows.CALLS, "the task to start")
    await client.cancel(handle.run_id)
    with pytest.raises(RunFailed, match="was cancelled") as caught:
        await handle.result(timeout=20)
    assert (caught.value.run_id, caught.value.status) == (handle.run_id, RunStatus.CANCELLED)
    assert caught.value.error is None


async def test_result_is_woken_by_the_finish_not_by_a_poll(
    runtime: Runtime, client_engine: AsyncEngine
) -> None:
    reads = count_run_reads(client_engine)
    async with Client(client_engine, app=app, poll_interval=NEVER) as client:
        handle = await client.start(flows.signup, Signup(email="ada@example.com"))
        waiting = asyncio.create_task(handle.result(timeout=30))
        await eventually(lambda: len(reads) >= 2, "result() to read the run after LISTEN")
        await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
        active = await waiting  # a poll would come only after an hour: TimeoutError first
        assert active.user_id == "ada"
        history = await client.history(handle.run_id)
    # One read before LISTEN, one after, then at most one per event the run appended.
    assert len(reads) <= 2 + len(history)


async def test_follow_yields_events_live_until_the_run_finishes(
    runtime: Runtime, client_engine: AsyncEngine
) -> None:
    async with Client(client_engine, app=app, poll_interval=NEVER) as client:
        handle = await client.start(flows.signup, Signup(email="ada@example.com"))
        seen: list[legato.HistoryEvent] = []

        async def follow() -> None:
            async for each in client.follow(handle.run_id):
                seen.append(each)

        following = asyncio.create_task(follow())
        await eventually(
            lambda: any(e.type == "event_wait_started" for e in seen), "the wait to be seen"
        )
        assert not following.done()  # the run is waiting, so follow() is too
        await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
        await asyncio.wait_for(following, 30)  # ends by itself once the run has finished
        history = (await client.get_run(handle.run_id)).history
        assert seen == history
        assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
        assert seen[-1].type == "run_succeeded"

        resumed = [e async for e in client.follow(handle.run_id, after_seq=3)]
        assert resumed == history[3:]


async def test_follow_of_an_unknown_run_raises_before_yielding(client: Client) -> None:
    with pytest.raises(legato.RunNotFound):
        async for _ in client.follow(legato.uuid7()):
            pass
    with pytest.raises(legato.InvalidArgument, match="after_seq=-1"):
        async for _ in client.follow(legato.uuid7(), after_seq=-1):
            pass


def test_a_bad_poll_interval_is_a_configuration_error(engine: AsyncEngine) -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises(legato.ConfigurationError, match="poll_interval="):
            Client(engine, poll_interval=bad)  # type: ignore[arg-type]
