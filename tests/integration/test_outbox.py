"""Run lifecycle events through the outbox to a real loopback HTTP server: written with
the transition, signed, filtered per endpoint, retried, dead-lettered and replayed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, Retry, Runtime, TaskContext, task, webhooks, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.engine.loops.relay import RelaySettings
from legato.errors import InvalidSignature
from legato.runtime import Roles
from legato.schema import DEFAULT_SHARD_COUNT, Outbox, Shards, WebhookEndpoints
from tests.helpers import count_rows, eventually, run_legato
from tests.webhook_receiver import Cue, receiver

SECRET = "test-secret-0123456789"


@task()
async def greet(ctx: TaskContext, name: str) -> str:
    return f"hello {name}"


@workflow("greeting")
def greeting(flow: Flow[str]) -> Node[str]:
    return flow.run(greet, flow.input)


class Refused(Exception):
    pass


@task(retry=Retry(attempts=1))
async def refuse(ctx: TaskContext, name: str) -> str:
    raise Refused(f"no {name}")


@workflow("doomed")
def doomed(flow: Flow[str]) -> Node[str]:
    return flow.run(refuse, flow.input)


@task(retry=Retry(attempts=1))
async def dawdle(ctx: TaskContext, name: str) -> str:
    await asyncio.sleep(30)  # past the workflow's execution_timeout: the run times out
    return name


@workflow("late", execution_timeout=timedelta(milliseconds=300))
def late(flow: Flow[str]) -> Node[str]:
    return flow.run(dawdle, flow.input)


app = App(workflows=[greeting, doomed, late])
FAST = RelaySettings(
    request_timeout=0.5,
    lease=timedelta(seconds=2),
    max_attempts=2,
    retry_delay=timedelta(milliseconds=50),
    max_retry_delay=timedelta(milliseconds=100),
)


@pytest_asyncio.fixture
async def runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    """Every loop, the relay included, polling fast."""
    rt = Runtime(
        engine, app, roles=Roles(relay=True), poll_interval=0.1, grace_period=1.0, relay=FAST
    )
    await rt.start()
    yield rt
    await rt.stop()


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=app) as c:
        yield c


async def test_lifecycle_events_reach_subscribed_endpoints_signed(
    engine: AsyncEngine, runtime: Runtime, client: Client
) -> None:
    async with receiver() as everything, receiver() as failures_only:
        await webhooks.add_endpoint(engine, everything.url, SECRET, workflows=["greeting", "late"])
        await webhooks.add_endpoint(
            engine, failures_only.url, "other-secret", events=["run.failed"]
        )
        ok = await client.start(greeting, "ada")
        bad = await client.start(doomed, "bob")
        slow = await client.start(late, "cy")

        def delivered() -> bool:
            return len(everything.unique()) == 4 and len(failures_only.unique()) == 1

        await eventually(delivered, "4 events to the first endpoint, 1 to the second")
        events = {
            (r.event["run_id"], r.event["type"]): webhooks.verify(SECRET, r.body, r.headers)
            for r in everything.unique().values()
        }
        assert set(events) == {
            (str(ok.run_id), "run.started"),
            (str(ok.run_id), "run.succeeded"),
            (str(slow.run_id), "run.started"),
            (str(slow.run_id), "run.timed_out"),
        }
        succeeded = events[(str(ok.run_id), "run.succeeded")]
        assert succeeded["workflow"] == "greeting"
        assert succeeded["data"] == {"status": "SUCCEEDED", "output": "hello ada"}
        timed_out = events[(str(slow.run_id), "run.timed_out")]
        data = timed_out["data"]
        assert isinstance(data, dict) and isinstance(data["error"], dict)
        assert data["status"] == "TIMED_OUT" and data["error"]["type"] == "RunTimedOut"
        (failed,) = failures_only.unique().values()
        event = webhooks.verify("other-secret", failed.body, failed.headers)
        assert (event["run_id"], event["type"]) == (str(bad.run_id), "run.failed")
        assert failed.event_id == event["id"]
        with pytest.raises(InvalidSignature):
            webhooks.verify(SECRET, failed.body, failed.headers)  # another endpoint's secret
    await eventually(lambda: _empty(engine), "the outbox to empty once delivered")


async def _empty(engine: AsyncEngine) -> bool:
    return await count_rows(engine, Outbox) == 0


async def test_failures_back_off_then_dead_letter_and_the_cli_replays(
    engine: AsyncEngine, database_url: str, runtime: Runtime, client: Client
) -> None:
    cues: list[Cue] = ["fail", "hang"]  # a 500, then a timeout: the budget of 2 is spent

    async with receiver(lambda n: cues[n] if n < len(cues) else "ok") as endpoint:
        await webhooks.add_endpoint(engine, endpoint.url, SECRET, events=["run.succeeded"])
        run = await client.start(greeting, "eve")
        await run.result(timeout=15)

        async def dead() -> bool:
            return bool(await webhooks.dead_letters(engine))

        await eventually(dead, "the delivery to be dead-lettered")
        listed = await run_legato("outbox", "list", "--json", database_url=database_url)
        assert listed.status == 0, listed.stderr
        (letter,) = json.loads(listed.stdout)
        assert letter["run_id"] == str(run.run_id) and letter["event_type"] == "run.succeeded"
        assert letter["attempts"] == 2
        assert "timed out" in letter["last_error"]
        assert len(endpoint.requests) == 2 and not endpoint.answered
        # Both attempts carried the same event id: what a receiver dedupes on.
        assert len({r.event_id for r in endpoint.requests}) == 1

        replayed = await run_legato(
            "outbox", "replay", str(letter["id"]), database_url=database_url
        )
        assert replayed.status == 0, replayed.stderr
        await eventually(lambda: len(endpoint.answered) == 1, "the replayed delivery")
        assert endpoint.answered[0].event_id == letter["event_id"]
    await eventually(lambda: _empty(engine), "the outbox to empty once delivered")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["ftp://example.com/x", "--secret", "s"], "not an absolute http:// or https:// URL"),
        (["https://example.com/x", "--secret", " "], "secret must not be empty"),
        (["https://example.com/x", "--secret", "s", "--event", "run.exploded"], "run.exploded"),
    ],
)
async def test_a_bad_endpoint_is_one_error_line_and_writes_nothing(
    engine: AsyncEngine, database_url: str, arguments: list[str], message: str
) -> None:
    outcome = await run_legato("webhooks", "add", *arguments, database_url=database_url)
    assert outcome.status != 0
    assert outcome.stderr.count("\n") == 1 and outcome.stderr.startswith("legato: error: ")
    assert message in outcome.stderr
    assert await count_rows(engine, WebhookEndpoints) == 0


async def test_unknown_ids_are_one_error_line(database_url: str) -> None:
    for arguments in (
        ["outbox", "show", "99"],
        ["outbox", "replay", "99"],
        ["webhooks", "remove", "9"],
    ):
        outcome = await run_legato(*arguments, database_url=database_url)
        assert outcome.status == 1, arguments
        assert (
            outcome.stderr.startswith("legato: error: no ") or "not a dead letter" in outcome.stderr
        )
        assert outcome.stderr.count("\n") == 1


async def test_webhooks_cli_adds_lists_and_removes(engine: AsyncEngine, database_url: str) -> None:
    added = await run_legato(
        "webhooks", "add", "https://hooks.example.com/x", "--secret", "s3", "--event",
        "run.failed", "--workflow", "greeting", database_url=database_url,
    )  # fmt: skip
    assert added.status == 0, added.stderr
    listed = await run_legato("webhooks", "list", "--json", database_url=database_url)
    (endpoint,) = json.loads(listed.stdout)
    assert endpoint == {
        "id": int(added.stdout),
        "url": "https://hooks.example.com/x",
        "event_types": ["run.failed"],
        "workflows": ["greeting"],
        "created_at": endpoint["created_at"],
    }
    assert "s3" not in listed.stdout
    removed = await run_legato(
        "webhooks", "remove", added.stdout.strip(), database_url=database_url
    )
    assert removed.status == 0, removed.stderr
    assert await count_rows(engine, WebhookEndpoints) == 0


async def test_a_quarantine_writes_run_quarantined_in_its_transaction(
    engine: AsyncEngine, client: Client
) -> None:
    endpoint = await webhooks.add_endpoint(engine, "https://hooks.example.com/q", SECRET)
    run = await client.start(greeting, "qa")  # no runtime: the run waits for its decision
    loop = DeciderLoop(engine, shards=Shards(DEFAULT_SHARD_COUNT), max_failures=1)
    async with engine.begin() as conn:
        await loop._failed(
            conn,
            loop.shards.of_run(run.run_id),
            run.run_id,
            1,
            RuntimeError("broken spec"),
            datetime.now(UTC),
        )
    (letter,) = await webhooks.dead_letters(engine, pending=True)
    assert (letter.run_id, letter.event_type, letter.endpoint_id) == (
        run.run_id,
        "run.quarantined",
        endpoint,
    )
    assert letter.payload == {
        "status": "RUNNING",
        "failures": 1,
        "error": "RuntimeError: broken spec",
    }
