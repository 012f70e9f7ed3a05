"""The statements a rerun, the run page's links and the bulk actions send touch one
shard key each (the checks of ``test_shard_statements.py``); their listing and count
are the marked fan-outs."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFilter, RunStatus
from legato.engine.repositories.params import FAN_OUT
from tests.integration import rerun_apps as apps
from tests.integration.test_shard_statements import _check, recorded


async def test_rerun_and_bulk_statements_touch_one_shard_key(engine: AsyncEngine) -> None:
    originals = await apps.fail_runs(engine, 4)
    async with Client(engine, app=apps.fixed) as client:
        await client.deploy(apps.fixed)
        failed = RunFilter(workflow="orders", status=RunStatus.FAILED, node="price")
        with recorded(engine) as sent:
            handle = await client.rerun(originals[0], from_node="price")
            await client.get_run(originals[0])
            await client.get_run(handle.run_id)
            assert await client.count_runs(failed) == 4
            assert (await client.bulk_rerun(failed)).done == 3
            assert (await client.bulk_resume(failed)).skipped == 4
            running = RunFilter(workflow="orders", status=RunStatus.RUNNING)
            assert (await client.bulk_cancel(running)).done == 4
    assert sum(FAN_OUT in s.sql for s in sent) >= 4  # the pages and the count
    checked, failures = await _check(engine, sent)
    assert checked >= 12, f"only {checked} statements on run-scoped tables were recorded"
    assert not failures, f"{len(failures)} of {checked} statements span keys:\n" + "\n".join(
        failures
    )
