"""On the cluster a start and a signal wake the decider at once, not at its next poll.

The queue triggers that NOTIFY on one PostgreSQL are not installed on a distributed
install; the routed statements send the same NOTIFYs from the coordinator's session
inside their transaction (``routed.wake``). The runtime here polls every 60 s, so a run
that finishes within the test's timeout was woken at each step (decider, worker, the
result's listener), not found by a poll.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from tests.e2e import flows
from tests.helpers import eventually

POLL = 60.0
WOKEN_WITHIN = 20.0  # well inside the poll interval, with room for a loaded machine


@pytest.mark.parametrize("wake_by", ["start", "signal"])
async def test_a_start_or_a_signal_wakes_the_decider_before_its_poll(
    citus_engine: AsyncEngine, wake_by: str
) -> None:
    runtime = Runtime(citus_engine, flows.app, poll_interval=POLL, grace_period=2.0)
    async with Client(citus_engine, app=flows.app) as client:
        await client.deploy(flows.app)
        await runtime.start()
        try:
            # The loops' first ticks are behind them once a first run has finished.
            first = await client.start(flows.chain, 1)
            await first.result(timeout=POLL)
            handle: Any = None
            if wake_by == "start":
                handle = await client.start(flows.chain, 2)
            else:
                handle = await client.start(flows.strict_approval, "ship")

                async def waiting() -> bool:  # decided once: now waits for the signal
                    return bool((await client.get_run(handle.run_id)).tasks)

                await eventually(waiting, "the run to wait for its signal", timeout=WOKEN_WITHIN)
                await client.signal(handle.run_id, "approval", flows.Approval(approved=True))
            await handle.result(timeout=WOKEN_WITHIN)
        finally:
            await runtime.stop()
