"""Bad input at every public entry point: a typed error, and nothing written; poison work
fails its attempt visibly and the engine goes on serving the next run."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel, JsonValue
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    ClientClosed,
    ConfigurationError,
    DatabaseUnavailable,
    Flow,
    InvalidArgument,
    InvalidInput,
    InvalidRunId,
    LegatoError,
    Node,
    ResultTimeout,
    Retry,
    RunAlreadyExists,
    RunFailed,
    RunNotFound,
    RunStatus,
    Runtime,
    TaskContext,
    TaskState,
    UnknownWorkflow,
    create_engine,
    task,
    uuid7,
    workflow,
)
from legato.schema import (
    DecideQueue,
    IdempotencyKeys,
    RunEvents,
    Runs,
    Signals,
    TaskQueue,
    Tasks,
    WorkflowDefinitions,
)


class Go(BaseModel):
    ok: bool


@task()
async def double(ctx: TaskContext, n: int) -> int:
    return n * 2


@task()
async def echo(ctx: TaskContext, value: JsonValue) -> JsonValue:
    return value


@workflow("errs.double")
def doubled(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.input)


@workflow("errs.echo")
def echoed(flow: Flow[JsonValue]) -> Node[JsonValue]:
    return flow.run(echo, flow.input)


@workflow("errs.waits")
def waits(flow: Flow[int]) -> Node[Go]:
    return flow.wait_for_event("errs.go", Go)


app = App([doubled, echoed, waits])


async def _rows(engine: AsyncEngine) -> dict[str, int]:
    tables = [Runs, Tasks, Signals, RunEvents, DecideQueue, TaskQueue, IdempotencyKeys]
    counts: dict[str, int] = {}
    async with engine.connect() as conn:
        for table in [*tables, WorkflowDefinitions]:
            query = select(func.count()).select_from(table.table)
            counts[table.table.name] = int((await conn.execute(query)).scalar_one())
    return counts


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=app) as c:
        yield c


def _nested(depth: int) -> list[object]:
    root: list[object] = []
    node = root
    for _ in range(depth - 1):
        child: list[object] = []
        node.append(child)
        node = child
    return root


Call = Callable[[], Awaitable[object]]


async def test_bad_arguments_at_every_entry_point_are_typed_and_write_nothing(
    client: Client, engine: AsyncEngine
) -> None:
    await client.deploy(app)
    running = await client.start(waits, 1)
    rid = running.run_id
    bare = Client(engine)  # no app: starts by name are checked as plain JSON
    before = await _rows(engine)
    naive = datetime(2030, 1, 1)
    async with engine.connect() as closed:
        pass
    earliest = datetime.min.replace(tzinfo=UTC)  # PostgreSQL would store -infinity
    east_min = datetime.min.replace(tzinfo=timezone(timedelta(hours=5)))  # before year 1 in UTC
    west_max = datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))  # after 9999 in UTC
    c: Any = client  # the calls below break the annotations on purpose
    b: Any = bare
    cases: list[tuple[type[LegatoError], str, Call]] = [
        (InvalidArgument, "10000 characters long", lambda: c.start("w" * 10_000, {})),
        (InvalidArgument, "U+0000", lambda: c.start("errs\x00double", 1)),
        (InvalidArgument, "a Workflow object or a workflow name", lambda: c.start(42, 1)),
        (
            InvalidRunId,
            "'not-a-uuid' is not a UUID",
            lambda: c.start(doubled, 1, run_id="not-a-uuid"),
        ),
        (InvalidRunId, "12 is not a UUID", lambda: c.start(doubled, 1, run_id=12)),
        (InvalidRunId, "not a UUIDv7", lambda: c.start(doubled, 1, run_id=str(uuid.uuid4()))),
        (InvalidArgument, "513 bytes", lambda: c.start(doubled, 1, idempotency_key="k" * 513)),
        (InvalidArgument, "U+0000", lambda: c.start(doubled, 1, idempotency_key="k\x00")),
        (InvalidArgument, "is empty", lambda: c.start(doubled, 1, idempotency_key="")),
        (InvalidArgument, "must be a string", lambda: c.start(doubled, 1, idempotency_key=7)),
        (InvalidArgument, "timezone-aware", lambda: c.start(doubled, 1, start_at=naive)),
        (InvalidArgument, "timezone-aware", lambda: c.start(doubled, 1, start_at="tomorrow")),
        (InvalidArgument, "3660 days from now", lambda: c.start(doubled, 1, start_at=earliest)),
        (InvalidArgument, "3660 days from now", lambda: c.start(doubled, 1, start_at=east_min)),
        (InvalidArgument, "3660 days from now", lambda: c.start(doubled, 1, start_at=west_max)),
        (InvalidArgument, "printable", lambda: c.start(doubled, 1, shard_key="t\x00")),
        (
            InvalidArgument,
            "connection=a closed AsyncConnection must be an open",
            lambda: c.start(doubled, 1, connection=closed),
        ),
        (InvalidArgument, "printable", lambda: c.start(doubled, 1, shard_key="t\u200b")),
        (InvalidInput, "$ is nan", lambda: c.start(echoed, float("nan"))),
        (InvalidInput, "$.x[0] is inf", lambda: c.start(echoed, {"x": [float("inf")]})),
        (InvalidInput, "lone surrogate", lambda: c.start(echoed, {"s": "\ud800"})),
        (InvalidInput, "invalid input", lambda: c.start(echoed, _nested(100_000))),
        (InvalidInput, "deeper than 100", lambda: c.start(echoed, _nested(101))),
        (InvalidInput, "invalid input", lambda: c.start(doubled, "two")),
        (InvalidInput, "$ is nan", lambda: b.start("errs.echo", float("nan"))),
        (InvalidInput, "$ is a set", lambda: b.start("errs.echo", {1, 2})),
        (InvalidInput, "deeper than 100", lambda: b.start("errs.echo", _nested(50_000))),
        (InvalidInput, "more than 4,299 digits", lambda: b.start("errs.echo", [10**5000])),
        (InvalidArgument, "takes a Workflow object", lambda: c.start_many("errs.double", [1])),
        (InvalidArgument, "sequence of inputs", lambda: c.start_many(doubled, "12")),
        (InvalidInput, "start_many() item 1: workflow", lambda: c.start_many(doubled, [1, "x", 3])),
        (InvalidInput, "$ is nan", lambda: c.start_many(echoed, [1, float("nan")])),
        (InvalidRunId, "not a UUID", lambda: c.signal("not-a-uuid", "errs.go", {"ok": True})),
        (InvalidArgument, "10000 characters", lambda: c.signal(rid, "g" * 10_000, None)),
        (InvalidArgument, "U+0000", lambda: c.signal(rid, "errs.go\x00", None)),
        (InvalidInput, "no wait for event 'errs.nope'", lambda: c.signal(rid, "errs.nope", 1)),
        (InvalidInput, "invalid payload", lambda: c.signal(rid, "errs.go", {"ok": "maybe?"})),
        (InvalidInput, "$ is nan", lambda: b.signal(rid, "errs.go", float("nan"))),
        (InvalidArgument, "10000 characters", lambda: c.emit("e" * 10_000, None)),
        (InvalidArgument, "must be a string", lambda: c.emit(None, None)),
        (InvalidRunId, "not a UUID", lambda: c.cancel("not-a-uuid")),
        (InvalidRunId, "None is not a UUID", lambda: c.cancel(None)),
        (InvalidRunId, "not a UUID", lambda: c.get_run("not-a-uuid")),
        (InvalidRunId, "not a UUID", lambda: c.get_run(b"bytes")),
        (RunNotFound, "no run", lambda: c.get_run(str(uuid7()))),
        (InvalidRunId, "not a UUID", lambda: c.result("not-a-uuid")),
        (InvalidArgument, "timeout -1", lambda: c.result(rid, timeout=-1)),
        (InvalidArgument, "timeout nan", lambda: c.result(rid, timeout=float("nan"))),
        (InvalidArgument, "timeout '5'", lambda: c.result(rid, timeout="5")),
        (InvalidRunId, "not a UUID", lambda: c.history("not-a-uuid")),
        (InvalidArgument, "after_seq=-1", lambda: c.history(rid, after_seq=-1)),
        (InvalidArgument, "limit=0", lambda: c.list_runs(limit=0)),
        (InvalidArgument, "limit='5'", lambda: c.list_runs(limit="5")),
        (InvalidArgument, "201 characters", lambda: c.list_runs(workflow="w" * 201)),
        (InvalidArgument, "not a run status", lambda: c.list_runs(status="BOGUS")),
        (InvalidRunId, "not a UUID", lambda: c.list_runs(before="yesterday")),
        (InvalidArgument, "takes a legato.App", lambda: c.deploy("errs.double")),
    ]
    for error, message, call in cases:
        with pytest.raises(error) as caught:
            await call()
        assert message in str(caught.value), (message, str(caught.value))
    assert await _rows(engine) == before


async def test_a_run_id_may_be_a_uuid_string_everywhere(client: Client) -> None:
    run_id = str(uuid7())
    handle = await client.start(waits, 1, run_id=run_id)
    assert handle.run_id == uuid.UUID(run_id)
    assert (await client.get_run(run_id)).run.status is RunStatus.RUNNING
    assert [e.type for e in await client.history(run_id)] == ["run_started"]
    await client.signal(run_id, "errs.go", Go(ok=True))
    page = await client.list_runs(before=str(uuid7()), status=RunStatus("RUNNING"))
    assert [r.id for r in page.runs] == [handle.run_id]
    await client.cancel(run_id)
    assert (await client.get_run(run_id)).run.cancel_requested


async def test_a_reused_run_id_is_run_already_exists_and_writes_nothing(
    client: Client, engine: AsyncEngine
) -> None:
    shards = await client.shards()
    # In the key the idempotency key below puts a run in: the two agree, so the second
    # start reaches the insert.
    run_id = shards.new_run_id(shards.of_key("fresh-key"))
    await client.start(doubled, 1, run_id=run_id)
    before = await _rows(engine)
    with pytest.raises(RunAlreadyExists, match=f"a run with id {run_id} already exists"):
        await client.start(doubled, 2, run_id=run_id)
    with pytest.raises(RunAlreadyExists):  # the transactional path: the key is not kept
        await client.start(doubled, 2, run_id=str(run_id), idempotency_key="fresh-key")
    await client.deploy(app)
    before = await _rows(engine)
    with pytest.raises(RunAlreadyExists):  # and by name
        await client.start("errs.double", 2, run_id=run_id)
    assert await _rows(engine) == before


async def test_a_workflow_object_starts_its_own_spec_and_a_name_the_deployed_one(
    client: Client, engine: AsyncEngine
) -> None:
    @workflow("errs.double")
    def doubled_v2(flow: Flow[int]) -> Node[int]:
        return flow.run(double, flow.input, name="changed")

    newer = Client(engine, app=App([doubled_v2]))
    with pytest.raises(UnknownWorkflow, match="no deployed version"):
        await newer.start("errs.double", 1)  # the client's app has it, but nothing is deployed
    assert (await _rows(engine))["workflow_definitions"] == 0

    assert await client.deploy(App([doubled])) == {"errs.double": 1}
    by_name = await newer.start("errs.double", 1)
    assert (await newer.get_run(by_name.run_id)).run.workflow_version == 1
    assert (await _rows(engine))["workflow_definitions"] == 1  # the app's version not stored
    with pytest.raises(InvalidInput, match="invalid input"):
        await newer.start("errs.double", "one")  # still validated with the app's model

    by_object = await newer.start(doubled_v2, 1)
    assert (await newer.get_run(by_object.run_id)).run.workflow_version == 2
    again = await newer.start("errs.double", 1)
    assert (await newer.get_run(again.run_id)).run.workflow_version == 1  # deployed is still 1


# -- poison work -------------------------------------------------------------------------


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


@task(retry=Retry(attempts=1))
async def raises_broken(ctx: TaskContext, n: int) -> int:
    raise BrokenStr


@task(retry=Retry(attempts=1))
async def raises_huge(ctx: TaskContext, n: int) -> int:
    raise ValueError("\ud800" + "m" * (5 << 20))


@task(retry=Retry(attempts=3, backoff=timedelta(seconds=30)))
async def returns_huge(ctx: TaskContext, n: int) -> str:
    return "x" * n


@task(retry=Retry(attempts=3, backoff=timedelta(seconds=30)))
async def returns_nan(ctx: TaskContext, n: int) -> float:
    return float("nan")


class Receipt(BaseModel):
    total: int


@task(retry=Retry(attempts=3, backoff=timedelta(seconds=30)))
async def returns_wrong_type(ctx: TaskContext, n: int) -> Receipt:
    return "not a receipt"  # type: ignore[return-value]  # what mypy would catch


@task()
async def returns_a_dict(ctx: TaskContext, n: int) -> Receipt:
    return {"total": n}  # type: ignore[return-value]  # fits the model: validated into it


def _one(name: str, fn: Any) -> Any:
    def body(flow: Flow[int]) -> Node[object]:
        return flow.run(fn, flow.input)

    return workflow(name)(body)


broken = _one("poison.broken", raises_broken)
huge_error = _one("poison.huge_error", raises_huge)
huge_output = _one("poison.huge_output", returns_huge)
nan_output = _one("poison.nan", returns_nan)
wrong_type = _one("poison.wrong_type", returns_wrong_type)
dict_output = _one("poison.dict", returns_a_dict)
poison_app = App([broken, huge_error, huge_output, nan_output, wrong_type, dict_output, doubled])


async def test_poison_tasks_fail_their_attempt_visibly_and_the_worker_goes_on(
    engine: AsyncEngine,
) -> None:
    runtime = Runtime(engine, poison_app, concurrency=1, poll_interval=0.2, max_output_bytes=10_000)
    async with runtime, Client(engine, app=poison_app) as client:
        too_big = "OutputTooLarge: the task returned 20002 bytes of JSON, over the 10000-byte"
        expectations = [
            (broken, 1, "BrokenStr: BrokenStr (its __str__ raised RuntimeError)", True),
            (huge_error, 1, "ValueError: \\ud800mmm", True),
            (huge_output, 20_000, too_big, False),
            (nan_output, 1, "InvalidOutput: the task's return value is not storable JSON", False),
            (
                wrong_type,
                1,
                "InvalidOutput: task 'returns_wrong_type' returned str 'not a receipt', which is "
                "not its declared return type Receipt",
                False,
            ),
        ]
        for flow, value, message, retryable in expectations:
            handle = await client.start(flow, value)
            with pytest.raises(RunFailed) as caught:
                await handle.result(timeout=30)
            assert message in str(caught.value)
            assert len(str(caught.value)) < 5_000
            details = await client.get_run(handle.run_id)
            (attempt,) = details.tasks  # not retried: the same code fails the same way
            assert attempt.state is TaskState.FAILED
            assert attempt.error is not None and attempt.error.retryable is retryable
            assert len(attempt.error.message) < 5_000
            assert attempt.error.traceback is None or len(attempt.error.traceback) < 8_100
        # concurrency=1: a slot leaked by any of the above would leave this run waiting.
        assert await (await client.start(doubled, 21)).result(timeout=30) == 42
        assert await (await client.start(dict_output, 3)).result(timeout=30) == {"total": 3}
        fits = await client.start(huge_output, 5_000)
        assert await fits.result(timeout=30) == "x" * 5_000


async def test_a_closed_client_refuses_every_call(database_url: str) -> None:
    client = await Client.connect(database_url, app=App([doubled]))
    await client.deploy()
    handle = await client.start(doubled, 1)
    await client.close()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.start(doubled, 2),
        lambda: client.get_run(handle.run_id),
        lambda: client.signal(handle.run_id, "errs.go", None),
        lambda: client.cancel(handle.run_id),
        lambda: client.list_runs(),
        lambda: client.result(handle.run_id, timeout=1),
    ]
    for call in calls:
        with pytest.raises(ClientClosed, match="this Client was closed"):
            await call()
    with pytest.raises(ClientClosed):
        async for _ in client.follow(handle.run_id):
            pass


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://legato@127.0.0.1:1/legato",  # nothing listens on port 1
        "postgresql://legato@no-such-host.invalid/legato",
    ],
)
async def test_a_client_of_an_unreachable_database_says_so(url: str) -> None:
    client = Client(create_engine(url, connect_args={"timeout": 5}))
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.start("errs.double", 1),
        lambda: client.get_run(uuid7()),
        lambda: client.list_runs(),
        lambda: client.signal(uuid7(), "errs.go", None),
    ]
    try:
        for call in calls:
            with pytest.raises(DatabaseUnavailable, match="cannot reach the database at"):
                await call()
    finally:
        await client.engine.dispose()


async def test_a_result_not_ready_in_time_is_a_timeout_not_an_outage(client: Client) -> None:
    """``TimeoutError`` is an ``OSError``: the client's outage mapping must let it by."""
    await client.deploy(app)
    running = await client.start(waits, 1)
    with pytest.raises(TimeoutError, match="is still running after") as raised:
        await client.result(running.run_id, timeout=0.2)
    assert isinstance(raised.value, ResultTimeout)


async def test_a_running_runtime_refuses_a_second_start(engine: AsyncEngine) -> None:
    """It would have run every loop twice."""
    async with Runtime(engine, App([doubled]), poll_interval=0.2) as runtime:
        with pytest.raises(ConfigurationError, match="this Runtime is already running"):
            await runtime.start()
