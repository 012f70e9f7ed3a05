"""The relay delivers to each endpoint on its own: one that hangs holds only its own
deliveries, and no endpoint ever has more than ``per_endpoint_concurrency`` requests
open at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, ConfigurationError, webhooks
from legato.db.server_check import check_database
from legato.engine.loops.relay import RelayLoop, RelaySettings
from legato.engine.repositories import outbox
from legato.schema import Outbox, Shards, uuid7
from tests.helpers import count_rows, eventually, run_legato
from tests.integration.test_outbox import SECRET, greeting
from tests.webhook_receiver import receiver

EVENTS = 6


def _settings(**options: int) -> RelaySettings:
    return RelaySettings(
        request_timeout=30.0,  # a held request stays open until the test releases it
        lease=timedelta(seconds=60),
        retry_delay=timedelta(milliseconds=50),
        max_retry_delay=timedelta(milliseconds=100),
        **options,
    )


async def _publish(engine: AsyncEngine, count: int) -> None:
    """``count`` lifecycle events, each fanned out to every endpoint."""
    async with Client(engine, app=App(workflows=[greeting])) as client:
        runs = [await client.start(greeting, f"r{n}") for n in range(count)]
    async with engine.begin() as conn:
        shards = await check_database(conn, "legato")
        for shard, run_ids in shards.group(r.run_id for r in runs).items():
            await outbox.publish(
                conn,
                shard,
                [
                    outbox.Event(uuid7(), run_id, "run.started", {"status": "RUNNING"})
                    for run_id in run_ids
                ],
            )


async def _shards(engine: AsyncEngine) -> Shards:
    async with engine.connect() as conn:
        return await check_database(conn, "legato")


@contextlib.asynccontextmanager
async def _running(loop: RelayLoop) -> AsyncIterator[RelayLoop]:
    task = asyncio.create_task(loop.run())
    try:
        yield loop
    finally:
        loop.stop()
        await task


async def test_a_hanging_endpoint_does_not_hold_a_healthy_ones_deliveries(
    engine: AsyncEngine,
) -> None:
    cap = 2
    async with receiver(lambda _: "hold") as stuck, receiver() as healthy:
        await webhooks.add_endpoint(engine, stuck.url, SECRET)
        await webhooks.add_endpoint(engine, healthy.url, SECRET)
        await _publish(engine, EVENTS)
        # Fewer than the 2 * EVENTS deliveries fit in flight at once: a relay that
        # waited for its whole batch would deliver the rest only after the hung
        # requests timed out.
        settings = _settings(batch_size=4, per_endpoint_concurrency=cap)
        shards = await _shards(engine)
        async with _running(RelayLoop(engine, settings, shards=shards, poll_interval=0.05)):
            await eventually(lambda: len(stuck.requests) == cap, "the stuck endpoint's requests")
            await eventually(
                lambda: len(healthy.unique()) == EVENTS,
                "every event delivered to the healthy endpoint while the other hangs",
            )
            assert stuck.open == cap and not stuck.answered  # still held: nothing released
            assert len(stuck.requests) == cap  # and no more opened to it than its cap
            stuck.released.set()
            await eventually(lambda: len(stuck.unique()) == EVENTS, "the stuck endpoint's rest")

            async def drained() -> bool:
                return await count_rows(engine, Outbox) == 0

            await eventually(drained, "the outbox to empty")
        assert stuck.peak == cap


async def test_an_endpoint_never_sees_more_requests_at_once_than_the_cap(
    engine: AsyncEngine,
) -> None:
    cap = 3
    async with receiver(lambda _: "hold") as counting:
        await webhooks.add_endpoint(engine, counting.url, SECRET)
        await _publish(engine, 4 * cap)
        shards = await _shards(engine)
        loop = RelayLoop(
            engine, _settings(batch_size=50, per_endpoint_concurrency=cap), shards=shards
        )
        try:
            while await loop.tick():  # every key in turn: the cap's worth in all
                pass
            await eventually(lambda: counting.open == cap, f"{cap} requests open")
            loop._all_due_at = float("-inf")  # the next poll: every key due again
            while await loop.tick():  # the endpoint is full: nothing more is claimed
                pass
            assert counting.peak == cap and len(counting.requests) == cap
        finally:
            counting.released.set()
            await loop.on_stop()  # the open requests are answered and recorded
        # Released, each answer frees one place at a time: still never above the cap.
        async with _running(RelayLoop(engine, loop.settings, shards=shards, poll_interval=0.05)):

            async def drained() -> bool:
                return await count_rows(engine, Outbox) == 0

            await eventually(drained, "every delivery made")
        assert len(counting.unique()) == 4 * cap
        assert counting.peak == cap


def test_the_per_endpoint_cap_is_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"per_endpoint_concurrency .* got 12, 50 and 0"):
        RelaySettings(per_endpoint_concurrency=0)


@pytest.mark.parametrize("value", ["0", "two", "1001"])
async def test_a_bad_per_endpoint_concurrency_is_one_error_line(
    database_url: str, value: str
) -> None:
    outcome = await run_legato(
        "relay", "--per-endpoint-concurrency", value, database_url=database_url
    )
    assert outcome.status == 2
    assert outcome.stderr.count("\n") == 1 and outcome.stderr.startswith("legato: error: ")
    assert "--per-endpoint-concurrency" in outcome.stderr and value in outcome.stderr
