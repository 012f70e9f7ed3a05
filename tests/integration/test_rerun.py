"""Rerunning runs on a real PostgreSQL: 200 runs fail at ``price`` on a bug, the fix is
deployed as a new version, and one bulk rerun by filter from ``price`` on the deployed
version makes every one succeed without running ``fetch`` again; the links both ways;
the typed errors."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    Client,
    InvalidArgument,
    RerunIncompatible,
    RunFilter,
    RunNotFound,
    RunStatus,
    RunStillRunning,
    Runtime,
    UnknownNode,
)
from legato.engine.repositories import reruns
from legato.schema import Runs
from tests.helpers import count_rows
from tests.integration import rerun_apps as apps

RUNS = 200


async def test_a_fix_deployed_reaches_every_failed_run(engine: AsyncEngine) -> None:
    apps.BODIES.clear()  # the other rerun tests in this process ran these bodies too
    originals = await apps.fail_runs(engine, RUNS)
    assert apps.BODIES["fetch"] == RUNS and apps.BODIES["store"] == 0
    apps.BODIES.clear()
    seen: list[int] = []
    async with Client(engine, app=apps.fixed) as client:
        assert (await client.deploy(apps.fixed)) == {"orders": 2}
        failed_at_price = RunFilter(workflow="orders", status=RunStatus.FAILED, node="price")
        assert await client.count_runs(failed_at_price) == RUNS
        async with Runtime(engine, apps.fixed, poll_interval=0.1, grace_period=5):
            result = await client.bulk_rerun(
                failed_at_price,
                from_node="price",
                version="deployed",
                progress=lambda counts: seen.append(counts.matched),
            )
            counts = (result.matched, result.done, result.skipped, result.failed)
            assert counts == (RUNS, RUNS, 0, 0)
            assert seen == list(range(1, RUNS + 1))
            async with asyncio.timeout(120):
                for order, original in enumerate(originals):
                    details = await client.get_run(original)
                    assert details.rerun_of is None and len(details.reruns) == 1
                    rerun = details.reruns[0]
                    assert await client.result(rerun) == order * 10 + 1
        again = await client.bulk_rerun(failed_at_price, from_node="price")
        assert (again.matched, again.done, again.skipped) == (RUNS, 0, RUNS)
        linked = await client.get_run(rerun)
    # No reused body ran again: fetch's output came from the originals.
    assert apps.BODIES == {"price": RUNS, "store": RUNS}
    assert linked.rerun_of == originals[-1] and linked.run.workflow_version == 2
    kinds = [(e.type, e.node_id) for e in linked.history[:3]]
    assert kinds == [("run_started", None), ("rerun_started", None), ("node_reused", "fetch")]
    assert linked.history[1].data == {
        "rerun_of": str(originals[-1]),
        "from_node": "price",
        "version": 2,
        "rerun": ["price", "store"],
        "reused": ["fetch"],
    }
    assert await count_rows(engine, Runs, Runs.rerun_of.is_not(None)) == RUNS


async def test_a_rerun_without_from_starts_at_the_first_failed_node(engine: AsyncEngine) -> None:
    (original,) = await apps.fail_runs(engine, 1)
    async with Client(engine, app=apps.buggy) as client:
        handle = await client.rerun(original, version="original")
        details = await client.get_run(handle.run_id)
        assert details.run.workflow_version == 1 and details.rerun_of == original
        assert details.history[1].data["from_node"] == "price"  # type: ignore[index, call-overload]
        assert [(t.node_id, t.state.value) for t in details.tasks] == [("fetch", "COMPLETED")]
        # Both ways, and a second rerun of the same run is allowed by id.
        second = await client.rerun(str(original), from_node="fetch", version="original")
        assert (await client.get_run(original)).reruns == (handle.run_id, second.run_id)
        assert (await client.get_run(second.run_id)).tasks == []  # nothing reused
        shards = await client.shards()
        assert shards.of_run(second.run_id) == shards.of_run(original)


async def test_rerun_errors_name_the_value_and_write_nothing(engine: AsyncEngine) -> None:
    (original,) = await apps.fail_runs(engine, 1)
    async with Client(engine, app=apps.text_fetch) as client:
        known = r"no node 'charge': its nodes are 'fetch', 'price', 'store'"
        with pytest.raises(UnknownNode, match=known):
            await client.rerun(original, from_node="charge", version="original")
        with pytest.raises(RunNotFound, match="no run"):
            await client.rerun(uuid.uuid4())
        with pytest.raises(InvalidArgument, match="version='latest' must be 'deployed'"):
            await client.rerun(original, version="latest")
        await client.deploy(apps.text_fetch)
        with pytest.raises(
            RerunIncompatible,
            match=r"node 'fetch' stored an output task 'fetch' no longer accepts.*"
            r"rerun from 'fetch'",
        ):
            await client.rerun(original, from_node="price")
        running = await client.start("orders", 5)  # no runtime: it stays RUNNING
        with pytest.raises(RunStillRunning, match=r"cancel it \(legato runs cancel"):
            await client.rerun(running.run_id)
        with pytest.raises(InvalidArgument, match=r"where='orders' must be a legato\.RunFilter"):
            await client.bulk_rerun("orders")  # type: ignore[arg-type]
        refused = await client.bulk_rerun(
            RunFilter(workflow="orders", status=RunStatus.FAILED), from_node="price"
        )
        assert (refused.matched, refused.done, refused.failed) == (1, 0, 1)
        assert "no longer accepts" in refused.errors[0][1]
        async with engine.connect() as conn:
            shard = (await client.shards()).of_run(original)
            assert await reruns.links(conn, shard, original) == (None, ())
    assert await count_rows(engine, Runs, Runs.rerun_of.is_not(None)) == 0


async def test_a_succeeded_run_needs_a_node(engine: AsyncEngine) -> None:
    async with Client(engine, app=apps.fixed) as client:
        await client.deploy(apps.fixed)
        async with Runtime(engine, apps.fixed, poll_interval=0.1, grace_period=5):
            done = await client.start("orders", 3)
            assert await done.result(timeout=30) == 31
            needs = "succeeded with no failed node: name the node"
            with pytest.raises(InvalidArgument, match=needs):
                await client.rerun(done.run_id)
            again = await client.rerun(done.run_id, from_node="store")
            assert await again.result(timeout=30) == 31
        assert [t.node_id for t in (await client.get_run(again.run_id)).tasks] == [
            "fetch",
            "price",
            "store",
        ]


async def test_bulk_cancel_and_resume_by_filter(engine: AsyncEngine) -> None:
    async with Client(engine) as client:
        await client.deploy(apps.fixed)
        handles = await client.start_many(apps.orders_fixed, list(range(5)))  # no runtime: RUNNING
        running = RunFilter(workflow="orders", status=RunStatus.RUNNING)
        cancelled = await client.bulk_cancel(running)
        assert (cancelled.matched, cancelled.done, cancelled.skipped) == (5, 5, 0)
        again = await client.bulk_cancel(running)
        assert (again.matched, again.done, again.skipped) == (5, 0, 5)  # requested already
        for handle in handles:
            assert (await client.get_run(handle.run_id)).run.cancel_requested
        resumed = await client.bulk_resume(running)
        assert (resumed.matched, resumed.done, resumed.skipped) == (5, 0, 5)  # none quarantined
