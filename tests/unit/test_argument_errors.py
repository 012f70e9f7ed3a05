"""Bad arguments to the public constructors that need no database: each raises a typed,
exported ``LegatoError`` naming the value and what to pass instead."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
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
    LegatoError,
    Node,
    RateLimit,
    Retry,
    Roles,
    Runtime,
    SpecError,
    TaskContext,
    TaskDefinitionError,
    create_engine,
    task,
    workflow,
)
from legato.db import outage
from legato.engine.loops.supervision import RestartPolicy
from legato.engine.loops.worker import Worker

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


def _waits(timeout: object) -> Callable[[], object]:
    def body(flow: Flow[int]) -> Node[int]:
        return flow.wait_for_event("args.go", int, timeout=timeout)  # type: ignore[arg-type]

    return lambda: workflow("args.waits")(body)


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
        lambda: Worker(raw_engine, app),
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
        lambda: Worker(engine, app, concurrency=0),
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
    "sleep huge": (SpecError, "sleep duration datetime.timedelta(days=999999999", _sleeps(HUGE)),
    "sleep int": (SpecError, "sleep duration 5 must be a timedelta", _sleeps(5)),
    "wait timeout huge": (SpecError, "the wait for 'args.go' has timeout", _waits(HUGE)),
    "wait timeout int": (SpecError, "has timeout 5: give a timedelta", _waits(5)),
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
