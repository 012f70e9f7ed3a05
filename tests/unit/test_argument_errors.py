"""Bad arguments to the public constructors that need no database: each raises a typed,
exported ``LegatoError`` naming the value and what to pass instead."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from legato import (
    App,
    Cache,
    Client,
    Concurrency,
    ConfigurationError,
    Flow,
    InvalidArgument,
    InvalidInput,
    InvalidOutput,
    InvalidRunId,
    InvalidSchedule,
    LegatoError,
    Node,
    RateLimit,
    Retry,
    Roles,
    Runtime,
    SpecError,
    TaskContext,
    TaskDefinitionError,
    Workflow,
    create_engine,
    task,
    uuid7,
    workflow,
)
from legato.engine.loops.supervision import RestartPolicy
from legato.engine.loops.worker import Worker
from legato.outages import outage
from legato.schema import Shards
from legato.testing import SimulationError, Simulator, run_task, task_context

URL = "postgresql://app@localhost/app"  # never connected to: every check comes first
HUGE = timedelta.max


@task()
async def double(ctx: TaskContext, n: int) -> int:
    return n * 2


@workflow("args.double")
def doubled(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.input)


app = App([doubled])
engine = create_engine(URL)
raw_engine = create_async_engine("postgresql+asyncpg://app@localhost/app")


def _runtime(**options: Any) -> Callable[[], object]:
    return lambda: Runtime(engine, app, **options)


def _sleeps(duration: object) -> Callable[[], object]:
    def body(flow: Flow[int]) -> Node[None]:
        return flow.sleep(duration)  # type: ignore[arg-type]

    return lambda: workflow("args.sleeps")(body)


def _built(step: Callable[[Any], object]) -> Callable[[], object]:
    """``@workflow`` of a body that does ``step`` (where the builder's checks run)."""

    def body(flow: Flow[int]) -> Node[int]:
        step(flow)
        return flow.input

    return lambda: workflow("args.built")(body)


def _waits(timeout: object) -> Callable[[], object]:
    def body(flow: Flow[int]) -> Node[int]:
        return flow.wait_for_event("args.go", int, timeout=timeout)  # type: ignore[arg-type]

    return lambda: workflow("args.waits")(body)


def _nan_case(flow: Flow[int]) -> None:
    with flow.switch(flow.input) as switch, switch.case(float("nan")):  # type: ignore[arg-type]
        flow.run(double, flow.input)


async def _body(ctx: TaskContext, n: int) -> int:
    return n


CASES: dict[str, tuple[type[LegatoError], str, Callable[[], object]]] = {
    # one schema check, whatever the entry point
    "schema empty": (ConfigurationError, "invalid schema name ''", lambda: create_engine(URL, "")),
    "schema pg_": (ConfigurationError, "reserves pg_", lambda: create_engine(URL, "pg_legato")),
    "schema PG_": (ConfigurationError, "reserves pg_", lambda: create_engine(URL, "PG_x")),
    "schema information_schema": (
        ConfigurationError,
        "reserves pg_... and information_schema",
        lambda: create_engine(URL, "information_schema"),
    ),
    "schema int": (ConfigurationError, "schema=5 must be a string", lambda: create_engine(URL, 5)),  # type: ignore[arg-type]
    "url int": (ConfigurationError, "database URL 5 must be a string", lambda: create_engine(5)),  # type: ignore[arg-type]
    "engine option unknown": (
        ConfigurationError,
        "SQLAlchemy refused the engine options ['bogus']",
        lambda: create_engine(URL, bogus=1),
    ),
    # engines not made by create_engine
    "Client raw engine": (
        ConfigurationError,
        "Client(engine): the engine for localhost:5432/app was not made by legato.create_engine",
        lambda: Client(raw_engine),
    ),
    "Worker raw engine": (
        ConfigurationError,
        "Worker: the engine for localhost:5432/app was not made by legato.create_engine",
        lambda: Worker(raw_engine, app, shards=Shards(16)),
    ),
    "Runtime raw engine": (
        ConfigurationError,
        "Runtime: the engine",
        lambda: Runtime(raw_engine, app),
    ),
    "Runtime not an engine": (
        ConfigurationError,
        "Runtime needs an AsyncEngine from legato.create_engine(url, schema), not str",
        lambda: Runtime("postgresql://", app),  # type: ignore[arg-type]
    ),
    "Worker concurrency 0": (
        ConfigurationError,
        "concurrency=0 must be an int from 1 to 10000",
        lambda: Worker(engine, app, shards=Shards(16), concurrency=0),
    ),
    # Client options
    "Client retention negative": (
        ConfigurationError,
        "idempotency_retention=datetime.timedelta(days=-1) must be a timedelta above zero",
        lambda: Client(engine, idempotency_retention=timedelta(days=-1)),
    ),
    "Client retention int": (
        ConfigurationError,
        "idempotency_retention=30 must be a timedelta",
        lambda: Client(engine, idempotency_retention=30),  # type: ignore[arg-type]
    ),
    "Client poll_interval huge": (
        ConfigurationError,
        "poll_interval=1e+30 must be a positive number of seconds, at most 3600",
        lambda: Client(engine, poll_interval=1e30),
    ),
    # every Runtime option
    "Runtime app": (ConfigurationError, "needs a legato.App, not 5", lambda: Runtime(engine, 5)),  # type: ignore[arg-type]
    "Runtime roles": (ConfigurationError, "roles=3 must be a legato.Roles", _runtime(roles=3)),
    "Roles not bool": (
        ConfigurationError,
        "Roles(decider='yes'): a role is True or False",
        lambda: Roles(decider="yes"),  # type: ignore[arg-type]
    ),
    "concurrency 0": (
        ConfigurationError,
        "concurrency=0 must be an int from 1",
        _runtime(concurrency=0),
    ),
    "concurrency nan": (
        ConfigurationError,
        "concurrency=nan must be an int",
        _runtime(concurrency=float("nan")),
    ),
    "concurrency huge": (
        ConfigurationError,
        "concurrency=10001 must be an int from 1 to 10000",
        _runtime(concurrency=10_001),
    ),
    "deciders 0": (
        ConfigurationError,
        "deciders=0 must be an int from 1 to 64",
        _runtime(deciders=0),
    ),
    "deciders negative": (ConfigurationError, "deciders=-2", _runtime(deciders=-2)),
    "decide_batch_size 0": (
        ConfigurationError,
        "decide_batch_size=0 must be an int from 1 to 10000",
        _runtime(decide_batch_size=0),
    ),
    "max_decision_failures str": (
        ConfigurationError,
        "max_decision_failures='3' must be an int",
        _runtime(max_decision_failures="3"),
    ),
    "lease zero": (
        ConfigurationError,
        "lease=datetime.timedelta(0) must be a timedelta above zero",
        _runtime(lease=timedelta(0)),
    ),
    "lease int": (ConfigurationError, "lease=30 must be a timedelta", _runtime(lease=30)),
    "lease huge": (ConfigurationError, "at most 366 days", _runtime(lease=HUGE)),
    "decision_retry_delay negative": (
        ConfigurationError,
        "decision_retry_delay=datetime.timedelta(days=-1, seconds=86399)",
        _runtime(decision_retry_delay=timedelta(seconds=-1)),
    ),
    "poll_interval 0": (
        ConfigurationError,
        "poll_interval=0 must be a positive number",
        _runtime(poll_interval=0),
    ),
    "poll_interval inf": (
        ConfigurationError,
        "poll_interval=inf",
        _runtime(poll_interval=float("inf")),
    ),
    "grace_period negative": (
        ConfigurationError,
        "grace_period=-1 must be a number of seconds from 0",
        _runtime(grace_period=-1),
    ),
    "grace_period nan": (
        ConfigurationError,
        "grace_period=nan",
        _runtime(grace_period=float("nan")),
    ),
    "startup_timeout negative": (
        ConfigurationError,
        "startup_timeout=-5",
        _runtime(startup_timeout=-5),
    ),
    "max_output_bytes 0": (
        ConfigurationError,
        "max_output_bytes=0 must be a positive int of bytes",
        _runtime(max_output_bytes=0, roles=Roles(worker=False)),
    ),
    "queues empty": (
        ConfigurationError,
        "queues=() must be a non-empty tuple",
        _runtime(queues=()),
    ),
    "queues a string": (
        ConfigurationError,
        "queues='default' must be a non-empty tuple",
        _runtime(queues="default"),
    ),
    "queues empty name": (
        ConfigurationError,
        "queues: queue '' must not be empty",
        _runtime(queues=("",)),
    ),
    "restarts junk": (
        ConfigurationError,
        "restarts=3 must be a RestartPolicy",
        _runtime(restarts=3),
    ),
    "restarts negative": (
        ConfigurationError,
        "RestartPolicy(max_restarts)=-1 must be an int from 0 to 10000",
        lambda: RestartPolicy(max_restarts=-1),
    ),
    "restarts delay nan": (
        ConfigurationError,
        "RestartPolicy(first_delay)=nan",
        lambda: RestartPolicy(first_delay=float("nan")),
    ),
    "relay junk": (
        ConfigurationError,
        "relay=3 must be a legato.engine.loops.relay.RelaySettings",
        _runtime(relay=3),
    ),
    # flow builders: durations past what a datetime holds, limits past the slots table
    "Retry backoff huge": (TaskDefinitionError, "from 0 to 3660 days", lambda: Retry(backoff=HUGE)),
    "Concurrency huge": (
        TaskDefinitionError,
        "Concurrency(limit=1000000): limit must be an int from 1 to 10000",
        lambda: Concurrency(1_000_000),
    ),
    "RateLimit per huge": (TaskDefinitionError, "at most 3660 days", lambda: RateLimit(1, HUGE)),
    "Cache expires huge": (TaskDefinitionError, "at most 3660 days", lambda: Cache(HUGE)),
    "task timeout huge": (
        TaskDefinitionError,
        "start_to_close datetime.timedelta(days=999999999",
        lambda: task(start_to_close=HUGE)(_body),
    ),
    "queue limit huge": (
        TaskDefinitionError,
        "queue_limits['default']=100000: a queue limit must be an int from 1 to 10000",
        lambda: App([doubled], queue_limits={"default": 100_000}),
    ),
    "execution_timeout huge": (
        SpecError,
        "execution_timeout must be a positive timedelta of at most 3660 days",
        lambda: workflow("args.slow", execution_timeout=HUGE),
    ),
    "sleep huge": (SpecError, "sleep duration is datetime.timedelta(days=999999999", _sleeps(HUGE)),
    "sleep int": (SpecError, "sleep duration is 5, not a timedelta", _sleeps(5)),
    "wait timeout huge": (SpecError, "the timeout of the wait for 'args.go' is", _waits(HUGE)),
    "wait timeout int": (SpecError, "wait for 'args.go' is 5, not a timedelta", _waits(5)),
    "run after a number": (
        SpecError,
        "after 5 must be a list of nodes",
        _built(lambda f: f.run(double, f.input, after=5)),
    ),
    "run after one node": (
        SpecError,
        "after Node('$input') must be a list of nodes",
        _built(lambda f: f.run(double, f.input, after=f.input)),
    ),
    "wait for a non-type": (
        SpecError,
        "payload type 5, which is no type pydantic can read",
        _built(lambda f: f.wait_for_event("args.go", 5)),
    ),
    "wait default NaN": (
        SpecError,
        "default of the wait for 'args.go' is not storable JSON: $ is nan",
        _built(lambda f: f.wait_for_event("args.go", float, default=float("nan"))),
    ),
    "one event two models": (
        SpecError,
        "the event 'args.go' is waited for with two payload types, int and str",
        _built(lambda f: [f.wait_for_event("args.go", int), f.wait_for_event("args.go", str)]),
    ),
    "map max_concurrency str": (
        SpecError,
        "map max_concurrency='x' must be a whole number",
        _built(lambda f: f.map(double, f.input, max_concurrency="x")),
    ),
    "child of a number": (
        SpecError,
        "flow.child() takes a workflow (made by @workflow), not 5",
        _built(lambda f: f.child(5, f.input)),
    ),
    "on_failure of a number": (
        SpecError,
        "on_failure() takes a task of one input",
        _built(lambda f: f.on_failure(5)),
    ),
    "switch case NaN": (SpecError, "is not storable JSON: $ is nan", _built(_nan_case)),
    "App of a number": (SpecError, "App(workflows) takes a list of workflows", lambda: App(5)),  # type: ignore[arg-type]
    "App of one workflow": (SpecError, "e.g. App([signup]), not <workflow", lambda: App(doubled)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize(("error", "message", "call"), CASES.values(), ids=list(CASES))
def test_bad_arguments_are_typed_errors_naming_the_value(
    error: type[LegatoError], message: str, call: Callable[[], object]
) -> None:
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FileNotFoundError(2, "No such file or directory"), "no server socket in that directory"),
        (
            ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)"),
            "connection refused",
        ),
        (ConnectionResetError(104, "Connection reset by peer"), "connection lost"),
        (TimeoutError(), "timed out"),
        (
            OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 5432)"),
            "Multiple exceptions: Connect call failed ('::1', 5432)",
        ),
    ],
    ids=["socket", "refused", "reset", "timeout", "multiple"],
)
def test_an_outage_is_named_in_a_few_words_without_errno(error: OSError, expected: str) -> None:
    wrapped = RuntimeError("while connecting")
    wrapped.__cause__ = error
    assert outage(error) == f"the database is unavailable ({expected})"
    assert outage(wrapped) == f"the database is unavailable ({expected})"


def test_a_bug_is_not_an_outage() -> None:
    assert outage(ValueError("a bug")) is None


@workflow("args.waits_for_go")
def waits_for_go(flow: Flow[int]) -> Node[int]:
    return flow.wait_for_event("args.go", int)


def _schedule(name: object = "args.nightly", **options: Any) -> Callable[[], object]:
    options.setdefault("every", timedelta(hours=1))
    return lambda: doubled.schedule(name, input=1, **options)  # type: ignore[arg-type]


SCHEDULE_CASES: dict[str, tuple[str, Callable[[], object]]] = {
    "every huge": ("every=datetime.timedelta(days=999999999", _schedule(every=HUGE)),
    "every under a second": (
        "every=datetime.timedelta(microseconds=1) must be from 1 second to 3660 days",
        _schedule(every=timedelta(microseconds=1)),
    ),
    "every negative": ("every must be a positive timedelta", _schedule(every=timedelta(-1))),
    "every nan": ("every must be a positive timedelta, got nan", _schedule(every=float("nan"))),
    "every int": ("every must be a positive timedelta, got 60", _schedule(every=60)),
    "grace huge": ("grace must be a timedelta from zero to 3660 days", _schedule(grace=HUGE)),
    "grace negative": ("grace must be a timedelta from zero", _schedule(grace=timedelta(-1))),
    "grace int": ("got 5", _schedule(grace=5)),
    "timezone unknown": (
        "unknown time zone 'Mars/Olympus_Mons'",
        _schedule(every=None, cron="0 3 * * *", timezone="Mars/Olympus_Mons"),
    ),
    "timezone int": (
        "timezone must be a string, got 1",
        _schedule(every=None, cron="0 3 * * *", timezone=1),
    ),
    "max_catch_up 0": (
        "max_catch_up must be an int from 1 to 10000, got 0",
        _schedule(max_catch_up=0),
    ),
    "max_catch_up negative": ("got -5", _schedule(max_catch_up=-5)),
    "max_catch_up huge": ("got 1000000000", _schedule(max_catch_up=10**9)),
    "name empty": ("schedule name '' must not be empty", _schedule("")),
    "name too long": ("over the 200-character limit", _schedule("n" * 201)),
    "name a list": ("schedule name ['a'] must be a string", _schedule(["a"])),
}


@pytest.mark.parametrize(("message", "call"), SCHEDULE_CASES.values(), ids=list(SCHEDULE_CASES))
def test_a_bad_schedule_is_invalid_schedule_and_is_not_declared(
    message: str, call: Callable[[], object]
) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        call()
    assert message in str(raised.value), str(raised.value)
    assert doubled.schedules == {}


async def _key(n: int) -> int:
    return n


BUILD_CASES: dict[str, tuple[type[LegatoError], str, Callable[[], object]]] = {
    "RestartPolicy max_delay str": (
        ConfigurationError,
        "RestartPolicy(max_delay)='x' must be a number of seconds",
        lambda: RestartPolicy(max_delay="x"),  # type: ignore[arg-type]
    ),
    "RestartPolicy healthy_after huge": (
        ConfigurationError,
        "RestartPolicy(healthy_after)=1e+300",
        lambda: RestartPolicy(healthy_after=1e300),
    ),
    "pool_size negative": (
        ConfigurationError,
        "pool_size=-1 must be an int from 1 to 10000",
        lambda: create_engine(URL, pool_size=-1),
    ),
    "pool_size no limit": (
        ConfigurationError,
        "pool_size=0",
        lambda: create_engine(URL, pool_size=0),
    ),
    "max_overflow negative": (
        ConfigurationError,
        "max_overflow=-1 must be an int from 0 to 10000",
        lambda: create_engine(URL, max_overflow=-1),
    ),
    "pool_timeout zero": (
        ConfigurationError,
        "pool_timeout=0 must be a positive number of seconds",
        lambda: create_engine(URL, pool_timeout=0),
    ),
    "pool_timeout negative": (
        ConfigurationError,
        "pool_timeout=-3",
        lambda: create_engine(URL, pool_timeout=-3),
    ),
    "connect_args int": (
        ConfigurationError,
        "connect_args=5 must be a dict of asyncpg.connect() arguments",
        lambda: create_engine(URL, connect_args=5),
    ),
    "server_settings int": (
        ConfigurationError,
        "connect_args['server_settings']=5 must be a dict of setting names to string values",
        lambda: create_engine(URL, connect_args={"server_settings": 5}),
    ),
    "pooler int": (
        ConfigurationError,
        "pooler=5 must be 'transaction', 'session' or None",
        lambda: create_engine(URL, pooler=5),  # type: ignore[arg-type]
    ),
    "lock_timeout int": (
        ConfigurationError,
        "lock_timeout=5 must be a PostgreSQL duration string such as '30s'",
        lambda: create_engine(URL, lock_timeout=5),  # type: ignore[arg-type]
    ),
    "idle timeout unit": (
        ConfigurationError,
        "idle_in_transaction_session_timeout='5 parsecs' must be a PostgreSQL duration",
        lambda: create_engine(URL, idle_in_transaction_session_timeout="5 parsecs"),
    ),
    "Retry multiplier huge": (
        TaskDefinitionError,
        "Retry(multiplier=1e+308): multiplier must be a finite number >= 1, at most 1000",
        lambda: Retry(multiplier=1e308),
    ),
    "Retry attempts huge": (
        TaskDefinitionError,
        "Retry(attempts=1000000000): attempts must be an int >= 1 (1 means no retry), at most "
        "10000",
        lambda: Retry(attempts=10**9),
    ),
    "RateLimit count huge": (
        TaskDefinitionError,
        "RateLimit(count=10000000000): count must be an int >= 1, at most 1000000",
        lambda: RateLimit(10**10, timedelta(seconds=1)),
    ),
    "RateLimit count zero": (
        TaskDefinitionError,
        "RateLimit(count=0)",
        lambda: RateLimit(0, timedelta(seconds=1)),
    ),
    "Cache key not callable": (
        TaskDefinitionError,
        "Cache(key='id'): key must be a function of the inputs",
        lambda: Cache(timedelta(hours=1), key="id"),  # type: ignore[arg-type]
    ),
    "Cache key of no inputs": (
        TaskDefinitionError,
        "Cache(key=<function <lambda>",
        lambda: task(cache=Cache(timedelta(hours=1), key=lambda: "k"))(_body),
    ),
    "Concurrency key of two inputs": (
        TaskDefinitionError,
        "cannot take the task's 1 input(s) (missing a required argument: 'b')",
        lambda: task(concurrency=Concurrency(1, key=lambda a, b: a))(_body),
    ),
    "RateLimit key keyword-only": (
        TaskDefinitionError,
        "key is called with the inputs, as key(*inputs)",
        lambda: task(rate_limit=RateLimit(1, timedelta(1), key=lambda *, n: n))(_body),
    ),
    "Cache expires zero": (
        TaskDefinitionError,
        "Cache(expires=datetime.timedelta(0)): expires must be a positive",
        lambda: Cache(timedelta(0)),
    ),
    "Cache expires int": (TaskDefinitionError, "Cache(expires=60)", lambda: Cache(60)),  # type: ignore[arg-type]
    "Concurrency zero": (TaskDefinitionError, "Concurrency(limit=0)", lambda: Concurrency(0)),
    "Concurrency bool": (TaskDefinitionError, "Concurrency(limit=True)", lambda: Concurrency(True)),
    "Concurrency float": (TaskDefinitionError, "Concurrency(limit=2.0)", lambda: Concurrency(2.0)),  # type: ignore[arg-type]
    "Concurrency 10001": (
        TaskDefinitionError,
        "limit must be an int from 1 to 10000",
        lambda: Concurrency(10_001),
    ),
    "Concurrency name empty": (
        TaskDefinitionError,
        "Concurrency: name '' must not be empty",
        lambda: Concurrency(1, name=""),
    ),
    "uuid7 str": (
        InvalidArgument,
        "uuid7(at_ms='now'): at_ms must be an int of milliseconds since the Unix epoch",
        lambda: uuid7("now"),  # type: ignore[arg-type]
    ),
    "uuid7 negative": (InvalidArgument, "uuid7(at_ms=-1)", lambda: uuid7(-1)),
    "uuid7 float": (InvalidArgument, "uuid7(at_ms=nan)", lambda: uuid7(float("nan"))),  # type: ignore[arg-type]
    "uuid7 past 9999": (
        InvalidArgument,
        "from 0 to 253402300799999 (the end of the year 9999)",
        lambda: uuid7(253_402_300_800_000),
    ),
    # legato.testing raises what the real API raises for the same mistake
    "Simulator of a task": (
        InvalidArgument,
        "Simulator() takes a Workflow object (made by @workflow), not <task 'double'",
        lambda: Simulator(double, 1),  # type: ignore[arg-type]
    ),
    "Simulator run_id": (
        InvalidRunId,
        "run id 'run-1' is not a UUID",
        lambda: Simulator(doubled, 1, run_id="run-1"),
    ),
    "Simulator naive now": (
        InvalidArgument,
        "now=datetime.datetime(2025, 1, 1, 0, 0) must be a timezone-aware datetime",
        lambda: Simulator(doubled, 1, now=datetime(2025, 1, 1)),
    ),
    "Simulator run_tasks": (
        InvalidArgument,
        "run_tasks='no' must be True or False",
        lambda: Simulator(doubled, 1, run_tasks="no"),  # type: ignore[arg-type]
    ),
    "task_context node_id": (
        InvalidArgument,
        "node_id '' must not be empty",
        lambda: task_context(node_id=""),
    ),
    "task_context run_id": (
        InvalidRunId,
        "run id 7 is not a UUID",
        lambda: task_context(run_id=7),  # type: ignore[arg-type]
    ),
    "task_context iteration": (
        InvalidArgument,
        "iteration=-1 must be an int >= 0",
        lambda: task_context(iteration=-1),
    ),
    "task_context attempt": (
        InvalidArgument,
        "attempt=0 must be an int >= 1",
        lambda: task_context(attempt=0),
    ),
    "task_context heartbeat": (
        InvalidArgument,
        "heartbeat=5 must be an async function",
        lambda: task_context(heartbeat=5),  # type: ignore[arg-type]
    ),
}


@pytest.mark.parametrize(("error", "message", "call"), BUILD_CASES.values(), ids=list(BUILD_CASES))
def test_bad_options_are_refused_when_built(
    error: type[LegatoError], message: str, call: Callable[[], object]
) -> None:
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value), str(raised.value)


Step = Callable[[Simulator[int, int]], Awaitable[object]]


async def _latest(sim: Simulator[int, int], node_id: object) -> object:
    return sim.task(node_id)  # type: ignore[arg-type]


SIMULATOR_STEPS: dict[str, tuple[type[LegatoError], str, Step]] = {
    "advance negative": (InvalidArgument, "advance(-1): give a timedelta", lambda s: s.advance(-1)),
    "advance nan": (InvalidArgument, "advance(nan)", lambda s: s.advance(float("nan"))),
    "advance inf": (InvalidArgument, "advance(inf)", lambda s: s.advance(float("inf"))),
    "advance huge": (InvalidArgument, "from zero to 3660 days", lambda s: s.advance(HUGE)),
    "advance str": (InvalidArgument, "advance('1h')", lambda s: s.advance("1h")),  # type: ignore[arg-type]
    "signal empty name": (
        InvalidArgument,
        "signal name '' must not be empty",
        lambda s: s.signal("", 1),
    ),
    "signal long name": (
        InvalidArgument,
        "over the 200-character limit",
        lambda s: s.signal("e" * 201),
    ),
    "signal non-JSON": (
        InvalidInput,
        "invalid payload for event 'args.go'",
        lambda s: s.signal("args.go", object()),
    ),
    "complete a number": (
        InvalidArgument,
        "node id 3 must be a string",
        lambda s: s.complete(3, 1),  # type: ignore[arg-type]
    ),
    "complete iteration": (
        InvalidArgument,
        "iteration=-1 must be an int >= 0",
        lambda s: s.complete("double", 1, iteration=-1),
    ),
    "task unknown node": (
        SimulationError,
        "node 'nope'[0] has not started",
        lambda s: _latest(s, "nope"),
    ),
    "task of a number": (InvalidArgument, "node id 5 must be a string", lambda s: _latest(s, 5)),
}
# On a run whose task node 'double' waits for complete or fail (run_tasks=False).
TASK_STEPS: dict[str, tuple[type[LegatoError], str, Step]] = {
    "complete non-JSON output": (
        InvalidOutput,
        "output of node 'double' does not fit the task's return type",
        lambda s: s.complete("double", object()),
    ),
    "complete wrong output type": (
        InvalidOutput,
        "output of node 'double' does not fit",
        lambda s: s.complete("double", "many"),
    ),
    "fail with a number": (
        InvalidArgument,
        "fail(error=5): give an exception or a message",
        lambda s: s.fail("double", 5),  # type: ignore[arg-type]
    ),
    "fail retryable str": (
        InvalidArgument,
        "retryable='no' must be True or False",
        lambda s: s.fail("double", "boom", retryable="no"),  # type: ignore[arg-type]
    ),
}


def _simulators() -> list[Any]:
    return [
        pytest.param(waits_for_go, True, error, message, step, id=label)
        for label, (error, message, step) in SIMULATOR_STEPS.items()
    ] + [
        pytest.param(doubled, False, error, message, step, id=label)
        for label, (error, message, step) in TASK_STEPS.items()
    ]


@pytest.mark.parametrize(("flow", "run_tasks", "error", "message", "step"), _simulators())
async def test_junk_to_a_simulator_is_a_typed_error_and_changes_nothing(
    flow: Workflow[int, int],
    run_tasks: bool,
    error: type[LegatoError],
    message: str,
    step: Step,
) -> None:
    sim = Simulator(flow, 1, run_tasks=run_tasks)
    await sim.settle()
    before = (sim.now, sim.status, sim.tasks)
    with pytest.raises(error) as raised:
        await step(sim)
    assert message in str(raised.value), str(raised.value)
    assert (sim.now, sim.status, sim.tasks) == before


RUN_TASK_CASES: dict[str, tuple[type[LegatoError], str, Callable[[], Awaitable[object]]]] = {
    "not a task": (
        InvalidArgument,
        "run_task() takes a task (made by @task), not <workflow 'args.double'>",
        lambda: run_task(doubled, 1),  # type: ignore[call-overload]
    ),
    "a plain function": (
        InvalidArgument,
        "run_task() takes a task (made by @task), not <function _body",
        lambda: run_task(_body, 1),  # type: ignore[call-overload]
    ),
    "non-JSON input": (
        InvalidInput,
        "argument 0 of task 'double' is not JSON: object",
        lambda: run_task(double, object()),  # type: ignore[misc]
    ),
    "NaN input": (
        InvalidInput,
        "the input list of task 'double' is not storable JSON: $[0] is nan",
        lambda: run_task(double, float("nan")),  # type: ignore[misc]
    ),
    "ctx not a context": (
        InvalidArgument,
        "ctx=5 must be a TaskContext, e.g. task_context()",
        lambda: run_task(double, 1, ctx=5),  # type: ignore[call-overload]
    ),
}


@pytest.mark.parametrize(
    ("error", "message", "call"), RUN_TASK_CASES.values(), ids=list(RUN_TASK_CASES)
)
async def test_run_task_refuses_what_the_real_api_refuses(
    error: type[LegatoError], message: str, call: Callable[[], Awaitable[object]]
) -> None:
    with pytest.raises(error) as raised:
        await call()
    assert message in str(raised.value), str(raised.value)
