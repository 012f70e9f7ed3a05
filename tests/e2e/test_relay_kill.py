"""``legato relay`` killed with SIGKILL mid-delivery, then restarted: every event reaches
the endpoint, re-deliveries carry the same event id, and a receiver that dedupes on it
sees each event exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime, webhooks
from legato.schema import Outbox
from tests.e2e.flows import chain
from tests.helpers import ROOT, count_rows, eventually
from tests.webhook_receiver import Cue, receiver

SECRET = "kill-test-secret"
RUNS = 10
BATCH = 4
PER_ENDPOINT = 2  # requests in flight to the endpoint: two hanging when the relay dies
ANSWERED_BEFORE_HANG = 6


async def _relay(database_url: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATO_")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "legato", "relay", "--database-url", database_url,
        "--batch-size", str(BATCH), "--per-endpoint-concurrency", str(PER_ENDPOINT),
        "--request-timeout", "5", "--lease", "6",
        "--poll-interval", "0.1", "--log-level", "WARNING",
        cwd=ROOT, env=env,
    )  # fmt: skip


async def test_a_killed_relay_loses_no_event(
    engine: AsyncEngine, database_url: str, runtime: Runtime, client: Client
) -> None:
    def cue(n: int) -> Cue:
        return "ok" if n < ANSWERED_BEFORE_HANG else "hang"

    async with receiver(cue) as hook:
        await webhooks.add_endpoint(engine, hook.url, SECRET)
        handles = [await client.start(chain, n) for n in range(RUNS)]
        for handle in handles:
            await handle.result(timeout=30)

        async def written() -> bool:
            return await count_rows(engine, Outbox) == 2 * RUNS

        await eventually(written, "a started and a succeeded event per run in the outbox")

        relay = await _relay(database_url)
        try:
            await eventually(
                lambda: len(hook.requests) == ANSWERED_BEFORE_HANG + PER_ENDPOINT,
                "the relay to be mid-delivery (two requests unanswered)",
                timeout=30,
            )
        finally:
            relay.send_signal(signal.SIGKILL)
            await relay.wait()
        cut_off = {r.event_id for r in hook.requests[ANSWERED_BEFORE_HANG:]}
        assert len(hook.answered) == ANSWERED_BEFORE_HANG

        hook.cue = lambda n: "ok"
        hook.released.set()
        relay = await _relay(database_url)
        try:

            async def drained() -> bool:
                return await count_rows(engine, Outbox) == 0

            await eventually(drained, "every delivery to be made after the restart", timeout=60)
        finally:
            relay.terminate()
            assert await relay.wait() == 0  # SIGTERM: a graceful stop

    unique = hook.unique()
    assert {(r.event["run_id"], r.event["type"]) for r in unique.values()} == {
        (str(h.run_id), kind) for h in handles for kind in ("run.started", "run.succeeded")
    }
    assert len(unique) == 2 * RUNS
    assert cut_off <= set(unique)  # the deliveries the kill cut off arrived after all
    # At least once: a delivery answered but not yet recorded when the relay died is
    # sent again, with the same event id, and the receiver's dedupe drops it.
    assert len(hook.answered) >= len(unique)
    for request in hook.requests:
        event = webhooks.verify(SECRET, request.body, request.headers)
        assert event["id"] == request.event_id
