"""SyncClient: blocking calls from many threads at once, all on one private loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from examples.signup import Active, Confirmed, Signup, app, signup
from legato import (
    ClientClosed,
    InvalidArgument,
    InvalidInput,
    RunFailed,
    RunFilter,
    RunNotFound,
    RunStatus,
    Runtime,
    SyncClient,
)
from legato.engine.repositories import decide_queue
from legato.schema import DEFAULT_SHARD_COUNT, Shards, uuid7
from tests.integration import rerun_apps

THREADS = 8
SHARDS = Shards(DEFAULT_SHARD_COUNT)


def _signup_in_a_thread(client: SyncClient, barrier: threading.Barrier, n: int) -> Active:
    barrier.wait()  # every thread calls at the same moment
    email = f"user{n}@example.com"
    handle = client.start(signup, Signup(email=email), idempotency_key=f"signup:{email}")
    assert client.start(signup, Signup(email=email), idempotency_key=f"signup:{email}").run_id == (
        handle.run_id
    )
    client.signal(handle.run_id, "signup.confirmed", Confirmed(code=f"code{n}"))
    return handle.result(timeout=60)


async def test_the_sync_client_serves_eight_threads_at_once(
    engine: AsyncEngine, database_url: str
) -> None:
    loop = asyncio.get_running_loop()
    async with Runtime(engine, app, poll_interval=0.2):
        client = await asyncio.to_thread(SyncClient, database_url, app=app)
        try:
            barrier = threading.Barrier(THREADS)
            with ThreadPoolExecutor(THREADS) as pool:
                results = await asyncio.gather(
                    *(
                        loop.run_in_executor(pool, _signup_in_a_thread, client, barrier, n)
                        for n in range(THREADS)
                    )
                )
            assert [r.confirmation for r in results] == [f"code{n}" for n in range(THREADS)]
            assert all(isinstance(r, Active) for r in results)
            page = await asyncio.to_thread(client.list_runs, workflow="signup", limit=100)
            assert len(page.runs) == THREADS
            assert {run.status for run in page.runs} == {RunStatus.SUCCEEDED}
        finally:
            await asyncio.to_thread(client.close)


async def test_the_sync_client_raises_the_async_clients_errors(
    engine: AsyncEngine, database_url: str
) -> None:
    def scenario() -> None:
        with SyncClient(database_url, app=app) as client:
            with pytest.raises(InvalidInput, match="email"):
                client.start("signup", {"mail": "x"})
            with pytest.raises(RunNotFound):
                client.get_run(uuid7())
            handle = client.start(signup, Signup(email="ada@example.com"))
            client.cancel(handle.run_id)
            with pytest.raises(RunFailed, match="cancelled"):
                handle.result(timeout=60)
        with pytest.raises(ClientClosed, match="closed: create a new SyncClient"):
            client.get_run(handle.run_id)

    async with Runtime(engine, app, poll_interval=0.2):
        await asyncio.to_thread(scenario)


async def test_the_sync_client_follows_a_run_to_its_end(
    engine: AsyncEngine, database_url: str
) -> None:
    def scenario() -> None:
        with SyncClient(database_url, app=app) as client:
            handle = client.start(signup, Signup(email="ada@example.com"))
            types: list[str] = []
            for event in client.follow(handle.run_id):
                types.append(event.type)
                if event.type == "event_wait_started":
                    client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
            assert types[-1] == "run_succeeded"
            assert [e.type for e in client.get_run(handle.run_id).history] == types
            first = next(iter(client.follow(handle.run_id, after_seq=1)))  # leaves early
            assert first.seq == 2

    async with Runtime(engine, app, poll_interval=0.2):
        await asyncio.to_thread(scenario)


async def test_the_sync_client_lists_and_resumes_quarantined_runs(
    engine: AsyncEngine, database_url: str
) -> None:
    client = await asyncio.to_thread(SyncClient, database_url, app=app)
    try:
        handle = await asyncio.to_thread(client.start, signup, Signup(email="ada@example.com"))
        assert await asyncio.to_thread(client.resume, str(handle.run_id)) is False
        async with engine.begin() as conn:  # parked the way the decider does after N failures
            await decide_queue.record_failure(
                conn, SHARDS.of_run(handle.run_id), handle.run_id, 10, "KeyError: 'x'", None
            )
        (parked,) = await asyncio.to_thread(client.list_quarantined)
        assert (parked.run_id, parked.failures) == (handle.run_id, 10)
        assert await asyncio.to_thread(client.resume, str(handle.run_id)) is True
        assert await asyncio.to_thread(client.list_quarantined) == []
    finally:
        await asyncio.to_thread(client.close)


async def test_the_sync_client_reruns_counts_and_acts_by_filter(
    engine: AsyncEngine, database_url: str
) -> None:
    # The blocking face of Client.rerun, count_runs and the bulk actions: the same
    # results and the same typed errors, the progress called once a run.
    originals = await rerun_apps.fail_runs(engine, 3)

    def scenario() -> None:
        with SyncClient(database_url, app=rerun_apps.fixed) as client:
            assert client.deploy(rerun_apps.fixed) == {"orders": 2}
            failed = RunFilter(workflow="orders", status=RunStatus.FAILED, node="price")
            assert client.count_runs(failed) == 3
            assert client.count_runs() == 3
            page = client.list_runs(version=1, error_type="ValueError", node="price", limit=10)
            assert {run.id for run in page.runs} == set(originals)
            assert client.list_runs(version=2).runs == []
            one = client.rerun(originals[0], from_node="price", version="deployed")
            assert one.result(timeout=60) == 1
            assert client.get_run(one.run_id).rerun_of == originals[0]
            seen: list[int] = []
            done = client.bulk_rerun(
                failed, from_node="price", progress=lambda r: seen.append(r.matched)
            )
            assert (done.matched, done.done, done.skipped, done.failed) == (3, 2, 1, 0)
            assert seen == [1, 2, 3]
            for original in originals:  # every rerun finished: none is RUNNING below
                assert client.result(
                    client.get_run(original).reruns[0], timeout=60
                ) == 1 + 10 * originals.index(original)
            with pytest.raises(
                InvalidArgument, match=r"where='orders' must be a legato\.RunFilter"
            ):
                client.bulk_cancel("orders")  # type: ignore[arg-type]
            with pytest.raises(RunNotFound):
                client.rerun(uuid7())
            pending = client.start("orders", 7, start_at=datetime.now(UTC) + timedelta(hours=1))
            waiting = RunFilter(workflow="orders", status=RunStatus.RUNNING)
            # Not quarantined, so there is nothing to resume: matched and skipped.
            resumed = client.bulk_resume(waiting)
            assert (resumed.matched, resumed.done, resumed.skipped) == (1, 0, 1)
            # Last: the decider applies the cancel at once, and the run leaves RUNNING.
            cancelled = client.bulk_cancel(waiting)
            assert (cancelled.matched, cancelled.done) == (1, 1)
            assert client.get_run(pending.run_id).run.cancel_requested

    async with Runtime(engine, rerun_apps.fixed, poll_interval=0.1, grace_period=5):
        await asyncio.to_thread(scenario)
