"""The embedding API: start runs, signal and cancel them, wait for results, read history.

```python
async with await Client.connect(app=app) as client:
    handle = await client.start(signup, Signup(email="a@example.com"))
    await client.signal(handle.run_id, "signup.confirmed", Confirmed(ok=True))
    active = await handle.result()          # typed: Active
```

Every method validates before it writes: bad input raises a ``legato.errors``
exception naming the problem, and nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Sequence,
)
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from pydantic import JsonValue
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.arguments import (
    RunId,
    as_run_id,
    check_after_seq,
    check_aware,
    check_duration,
    check_limit,
    check_max_payload,
    check_poll_interval,
    check_timeout,
    run_status,
)
from legato.db import create_engine
from legato.db.schema_names import engine_schema, resolve_schema
from legato.db.server_check import check_database, connect, missing_relation
from legato.engine.deploy import deploy_workflows
from legato.engine.repositories import (
    decide_queue,
    definitions,
    idempotency_keys,
    partitions,
    run_events,
    runs,
    signals,
    tasks,
)
from legato.engine.repositories.runs import RunRow
from legato.engine.transport.driver import DriverStatements
from legato.errors import (
    ConfigurationError,
    InvalidArgument,
    InvalidInput,
    InvalidRunId,
    PayloadTooLarge,
    RunAlreadyExists,
    RunFailed,
    RunFinished,
    RunNotFound,
    UnknownWorkflow,
)
from legato.flow import App, InputValidationError, UnknownEventError, Workflow, WorkflowDefinition
from legato.handle import RunHandle as RunHandle
from legato.limits import check_idempotency_key, check_json, check_name, json_size
from legato.models import (
    FINAL_EVENTS,
    HistoryEvent,
    QuarantinedRun,
    RunDetails,
    RunPage,
    run_failed,
)
from legato.models_from_rows import (
    attempt_from_row,
    event_from_row,
    quarantined_from_row,
    run_from_row,
)
from legato.observability import tracing
from legato.run_wakeups import RunWakeups, woken
from legato.schema import RunStatus, Shards
from legato.schema.types import strip_nul
from legato.starting import SpecVersions, start_connection

In = TypeVar("In")
Out = TypeVar("Out")
R = TypeVar("R")
P = ParamSpec("P")

DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
# How often a waiting result() or follow() reads again when no notification arrives.
DEFAULT_POLL_INTERVAL = 1.0


# Events per history read: a longer history is read page by page.
_HISTORY_PAGE = 10_000

# How many runs' workflow names a Client remembers for signal().
_REMEMBERED_RUNS = 10_000

# An idempotency key kept longer than this would outlive any sensible retry.
_MAX_RETENTION = timedelta(days=3660)


def _schema_explained(
    method: Callable[Concatenate[Client, P], Awaitable[R]],
) -> Callable[Concatenate[Client, P], Coroutine[Any, Any, R]]:
    """A ``Client`` method whose statement on a table the schema lacks raises the typed
    error saying what to do (``Client._explain``), not the driver's ProgrammingError."""

    @wraps(method)
    async def explained(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        except DBAPIError as error:
            await self._explain(error)
            raise

    return explained


class Client:
    """Talks to Legato's tables; safe to share across tasks of one event loop."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        app: App | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        idempotency_retention: timedelta = timedelta(days=30),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        owns_engine: bool = False,
        shards: Shards | None = None,
    ) -> None:
        self.schema = engine_schema(engine, "Client(engine)")
        if app is not None and not isinstance(app, App):
            raise ConfigurationError(f"Client(app=...) must be a legato.App, not {app!r}")
        check_max_payload(max_payload_bytes)
        check_poll_interval(poll_interval)
        check_duration(
            "idempotency_retention", idempotency_retention, "timedelta(days=30)", _MAX_RETENTION
        )
        self.engine = engine
        self.app = app
        self.max_payload_bytes = max_payload_bytes
        self.idempotency_retention = idempotency_retention
        self.poll_interval = float(poll_interval)
        self._owns_engine = owns_engine
        self._wakeups = RunWakeups(engine, self.schema)
        self._versions = SpecVersions()
        self._driver = DriverStatements(engine)
        self._bounds: list[tuple[uuid.UUID, uuid.UUID]] | None = None
        # The installation's shard keys: from check_database at connect, else read on
        # first use (a client made from an engine). Fixed for the schema's lifetime.
        self._shards = shards
        # A run's workflow never changes: signalling a run again needs no read.
        self._workflow_of: OrderedDict[uuid.UUID, str] = OrderedDict()

    @classmethod
    async def connect(
        cls,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        app: App | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Client:
        """Connect (``LEGATO_DATABASE_URL`` by default) and check the server and schema."""
        check_max_payload(max_payload_bytes)
        check_poll_interval(poll_interval)
        if app is not None and not isinstance(app, App):
            raise ConfigurationError(f"Client.connect(app=...) must be a legato.App, not {app!r}")
        engine = create_engine(database_url, schema)
        try:
            async with connect(engine) as conn:
                shards = await check_database(conn, resolve_schema(schema))
        except BaseException:
            await engine.dispose()
            raise
        return cls(
            engine,
            app=app,
            max_payload_bytes=max_payload_bytes,
            poll_interval=poll_interval,
            owns_engine=True,
            shards=shards,
        )

    async def shards(self) -> Shards:
        """The installation's shard keys (``legato.schema.shards``), read once: at
        ``connect``, or on first use by a client made from an engine."""
        if self._shards is None:
            self._shards = await self._read(runs.installed_shards)
        return self._shards

    async def _shard_of(self, run_id: uuid.UUID) -> int:
        """The key of run ``run_id`` (and of every row of it): read from the id."""
        return (await self.shards()).of_run(run_id)

    async def _explain(self, error: DBAPIError) -> None:
        """Raise ``IncompatibleDatabase`` when ``error`` is a missing table or column and
        the schema is not at this package's head (never migrated, or migrated by another
        Legato): a client made from an engine is not checked until then."""
        if missing_relation(error):
            async with connect(self.engine) as conn:
                await check_database(conn, self.schema)

    async def close(self) -> None:
        """Stop listening for run events; dispose of the engine if the client made it."""
        await self._wakeups.close()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- deploying ----------------------------------------------------------------------------

    @_schema_explained
    async def deploy(self, app: App | None = None) -> dict[str, int]:
        """Store every workflow of ``app`` (children included) and mark those versions
        deployed. Unchanged specs keep their version. Returns name -> version."""
        target = app or self.app
        if target is None:
            raise UnknownWorkflow("nothing to deploy: pass an App")
        if not isinstance(target, App):
            raise InvalidArgument(f"deploy() takes a legato.App, not {target!r}")
        async with self.engine.begin() as conn:
            return await deploy_workflows(conn, target.workflows.values())

    # -- starting -----------------------------------------------------------------------------

    @overload
    async def start(
        self,
        workflow: Workflow[In, Out],
        input: In,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        connection: AsyncConnection | None = None,
        shard_key: str | None = None,
    ) -> RunHandle[Out]: ...

    @overload
    async def start(
        self,
        workflow: str,
        input: JsonValue,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        connection: AsyncConnection | None = None,
        shard_key: str | None = None,
    ) -> RunHandle[JsonValue]: ...

    async def start(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        connection: AsyncConnection | None = None,
        shard_key: str | None = None,
    ) -> RunHandle[Any]:
        """Start a run and return its handle.

        A ``Workflow`` object starts that exact spec (stored as a new version if it is
        new); a name starts the deployed version of that name, validating the input
        with the client's app's model of that name when it has one. With an
        ``idempotency_key``, starting again (even concurrently) returns the same run.
        ``run_id`` (a ``uuid.UUID`` or UUID string) must be a UUIDv7 inside an existing
        partition and not already used (``RunAlreadyExists``); ``start_at`` (a
        timezone-aware datetime) delays the run's first decision. With ``connection``
        (the caller's, in a transaction the caller commits) the run, its idempotency key
        and its wake-up are written in that transaction: the run exists if and only if
        the caller commits.

        ``shard_key`` (a tenant or account id) puts the run in that key's shard: runs
        started with one ``shard_key`` share a key (and so, on a distributed PostgreSQL,
        a node). Without it, a start with an ``idempotency_key`` takes that key's shard
        (so a retry finds the key), else any. A given ``run_id`` must already lie in
        that shard (``InvalidArgument`` otherwise): omit it, or make it with
        ``(await client.shards()).new_run_id(shards.of_key(shard_key))``. Retry an
        idempotent start with the same ``shard_key`` as the first.
        """
        return await self._start_run(
            workflow, input, idempotency_key, run_id, start_at, connection, shard_key
        )

    @_schema_explained
    async def _start_run(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any,
        idempotency_key: str | None,
        run_id: RunId | None,
        start_at: datetime | None,
        connection: AsyncConnection | None,
        shard_key: str | None,
    ) -> RunHandle[Any]:
        _check_connection(connection)
        name, definition = self._target(workflow)
        payload = self._validated_input(definition, name, input)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key, InvalidArgument)
        if start_at is not None:
            check_aware("start_at", start_at)
        given_id = None if run_id is None else as_run_id(run_id)
        shards = await self.shards()
        chosen = None
        if shard_key is not None:
            chosen = shards.of_key(shard_key)
        elif idempotency_key is not None:
            chosen = shards.of_key(idempotency_key)
        if given_id is not None:
            if chosen is not None and shards.of_run(given_id) != chosen:
                by = (
                    f"shard_key={shard_key!r}"
                    if shard_key is not None
                    else f"idempotency_key={idempotency_key!r}"
                )
                raise InvalidArgument(
                    f"run_id {given_id} lies in shard {shards.of_run(given_id)}, but {by} "
                    f"puts the run in shard {chosen}: omit run_id, or generate it with the "
                    f"key (Shards.new_run_id({chosen}), from await client.shards())"
                )
            await self._check_run_id(given_id)
        new_id = given_id or shards.new_run_id(chosen)
        shard = shards.of_run(new_id)
        try:
            return await self._start_one(
                workflow,
                name,
                definition,
                payload,
                shard,
                new_id,
                idempotency_key,
                start_at,
                connection,
            )
        except IntegrityError:
            if given_id is None or await self._read(lambda c: runs.get(c, shard, given_id)) is None:
                raise
            raise RunAlreadyExists(
                f"a run with id {given_id} already exists: run ids are unique, so pass a "
                "fresh legato.uuid7() (or an idempotency_key to make starts repeatable)"
            ) from None

    async def _start_one(
        self,
        workflow: Workflow[Any, Any] | str,
        name: str,
        definition: WorkflowDefinition | None,
        payload: JsonValue,
        shard: int,
        new_id: uuid.UUID,
        idempotency_key: str | None,
        start_at: datetime | None,
        connection: AsyncConnection | None,
    ) -> RunHandle[Any]:
        own = definition if isinstance(workflow, WorkflowDefinition) else None
        version = self._versions.known(own) if own is not None else None
        if connection is not None and own is not None:
            version = await self._versions.stored(self.engine, own)
        # The caller's trace context goes with the run: its task spans join that trace.
        trace = tracing.capture()
        new = runs.NewRun(
            new_id, name, version or 0, payload, None, idempotency_key, start_at, trace
        )
        if version is not None and idempotency_key is None:
            # The common case is one statement, atomic on its own: one round trip.
            if connection is None:
                await runs.start_one(self._driver, shard, new, "started")
            else:
                async with start_connection(connection, self._autocommit, self.schema) as conn:
                    await self._start(conn, shard, [new])
            return RunHandle(self, new_id, _typed(workflow))
        async with start_connection(connection, self.engine.begin, self.schema) as conn:
            if own is not None:
                version = await self._versions.version_of(conn, own)
            else:
                version = await definitions.deployed_version(conn, name)
                if version is None:
                    raise UnknownWorkflow(
                        f"unknown workflow {name!r}: no deployed version "
                        "(deploy it with `legato deploy --app module:app`, or start the "
                        "Workflow object itself)"
                    )
            if idempotency_key is not None:
                existing = await idempotency_keys.claim(
                    conn,
                    shard,
                    name,
                    idempotency_key,
                    new_id,
                    datetime.now(UTC) + self.idempotency_retention,
                )
                if existing is not None:
                    return RunHandle(self, existing, _typed(workflow))
            await self._start(conn, shard, [replace(new, workflow_version=version)])
        if own is not None and connection is None:
            self._versions.remember(own, version)
        return RunHandle(self, new_id, _typed(workflow))

    @_schema_explained
    async def start_many(
        self,
        workflow: Workflow[In, Out],
        inputs: Sequence[In],
        *,
        connection: AsyncConnection | None = None,
        shard_key: str | None = None,
    ) -> list[RunHandle[Out]]:
        """Start many runs of one workflow in one transaction: one statement per shard
        key they fall in (a statement writes every table of its runs). With
        ``shard_key`` every run goes to that key's shard, so the batch is one
        statement; without, the runs spread over the keys. With ``connection``, in the
        caller's transaction, as ``start``."""
        if not isinstance(workflow, WorkflowDefinition):
            raise InvalidArgument(
                f"start_many() takes a Workflow object, not {workflow!r} "
                "(start runs by name one at a time with start())"
            )
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            raise InvalidArgument(
                f"start_many() takes a sequence of inputs, not {type(inputs).__name__}"
            )
        _check_connection(connection)
        payloads: list[JsonValue] = []
        for i, item in enumerate(inputs):
            try:
                payloads.append(self._validated_input(workflow, workflow.name, item))
            except (InvalidInput, PayloadTooLarge) as error:
                raise type(error)(f"start_many() item {i}: {error}") from None
        shards = await self.shards()
        chosen = None if shard_key is None else shards.of_key(shard_key)
        if not payloads:
            return []
        ids = [shards.new_run_id(chosen) for _ in payloads]
        by_shard: dict[int, list[tuple[uuid.UUID, JsonValue]]] = {}
        for run_id, payload in zip(ids, payloads, strict=True):
            by_shard.setdefault(shards.of_run(run_id), []).append((run_id, payload))
        trace = tracing.capture()
        if connection is not None:
            await self._versions.stored(self.engine, workflow)
        async with start_connection(connection, self.engine.begin, self.schema) as conn:
            version = await self._versions.version_of(conn, workflow)
            for shard, group in sorted(by_shard.items()):
                await self._start(
                    conn,
                    shard,
                    [
                        runs.NewRun(run_id, workflow.name, version, payload, trace_context=trace)
                        for run_id, payload in group
                    ],
                )
        if connection is None:
            self._versions.remember(workflow, version)
        return [RunHandle(self, run_id, workflow) for run_id in ids]

    async def _start(self, conn: AsyncConnection, shard: int, new_runs: list[runs.NewRun]) -> None:
        await runs.start_runs(conn, shard, new_runs, "started")

    def _target(self, workflow: object) -> tuple[str, WorkflowDefinition | None]:
        """The workflow's name, and the definition that validates its input."""
        if isinstance(workflow, WorkflowDefinition):
            return workflow.name, workflow
        if not isinstance(workflow, str):
            raise InvalidArgument(
                f"start() takes a Workflow object or a workflow name, not {workflow!r}"
            )
        name = check_name("workflow name", workflow, InvalidArgument)
        return name, self.app.workflows.get(name) if self.app is not None else None

    def _validated_input(
        self, definition: WorkflowDefinition | None, workflow: str, value: object
    ) -> JsonValue:
        what = f"input of workflow {workflow!r}"
        if definition is None:  # by name, no model to check against
            return self._sized(_plain(value), what)
        try:
            payload = definition.validate_input(value)
        except InputValidationError as error:
            raise InvalidInput(str(error)) from None
        except RecursionError:
            raise InvalidInput(f"{what} is nested too deeply to validate") from None
        return self._sized(payload, what)

    def _sized(self, payload: JsonValue, what: str) -> JsonValue:
        payload = strip_nul(check_json(what, payload, InvalidInput))
        size = json_size(payload)
        if size > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"{what} is {size} bytes, over the {self.max_payload_bytes}-byte limit "
                "(Client(max_payload_bytes=...) raises it)"
            )
        return payload

    async def _check_run_id(self, run_id: uuid.UUID) -> None:
        if self._bounds is None:
            self._bounds = await self._read(partitions.run_partition_bounds)
        try:
            partitions.check_run_id(run_id, self._bounds)
        except InvalidRunId:  # partitions may have been added since
            self._bounds = await self._read(partitions.run_partition_bounds)
            partitions.check_run_id(run_id, self._bounds)

    # -- signals, events, cancellation -------------------------------------------------------

    @_schema_explained
    async def signal(self, run_id: RunId, name: str, payload: Any = None) -> None:
        """Send a signal to a running run; buffered until a wait for ``name`` takes it."""
        run_id = as_run_id(run_id)
        check_name("signal name", name, InvalidArgument)
        what = f"signal {name!r}"
        shard = await self._shard_of(run_id)
        workflow_name = self._workflow_of.get(run_id)
        if workflow_name is None and self.app is not None:
            # The payload is checked against the model of the run's workflow.
            run = await self._read(lambda conn: self._running(conn, shard, run_id, what))
            workflow_name = run.workflow_name
        data = self._signal_payload(workflow_name, name, payload)
        if not await signals.send_now(self._driver, shard, run_id, name, data):
            self._workflow_of.pop(run_id, None)
            await self._read(lambda conn: self._running(conn, shard, run_id, what))  # says why
            raise RunFinished(f"cannot {what}: run {run_id} has just finished")
        if workflow_name is None:
            return
        self._workflow_of[run_id] = workflow_name
        self._workflow_of.move_to_end(run_id)
        if len(self._workflow_of) > _REMEMBERED_RUNS:
            self._workflow_of.popitem(last=False)

    @_schema_explained
    async def emit(self, name: str, payload: Any = None) -> list[uuid.UUID]:
        """Signal every run currently waiting for event ``name``; returns their ids.

        A run that already has an unconsumed ``name`` signal (an earlier emit its
        decider has not taken yet) is skipped, so emitting twice in a row does not
        satisfy a later wait for the same event.

        Fan-out across shard keys: the waiting runs are found in one statement over
        every key, then signalled with one statement per key they fall in.
        """
        check_name("event name", name, InvalidArgument)
        # Checked before any run is found waiting: a payload no run could take is refused
        # even while none waits (each waiting run's model checks it again below).
        self._sized(_plain(payload), f"payload of event {name!r}")
        shards = await self.shards()
        async with self.engine.begin() as conn:
            waiting = await tasks.open_waits(conn, name)
            # Each workflow checks the payload against its own event model, once.
            data = {
                workflow: self._signal_payload(workflow, name, payload)
                for workflow in sorted(set(waiting.values()))
            }
            reached: list[uuid.UUID] = []
            for shard, run_ids in shards.group(waiting).items():
                deliveries = [signals.Delivery(i, data[waiting[i]]) for i in run_ids]
                reached += await signals.send_many(conn, shard, name, deliveries)
            return sorted(reached)

    def _signal_payload(self, workflow_name: str | None, name: str, payload: Any) -> JsonValue:
        definition = (
            self.app.workflows.get(workflow_name)
            if self.app is not None and workflow_name is not None
            else None
        )
        if definition is not None:
            try:
                data = definition.validate_event(name, payload)
            except (InputValidationError, UnknownEventError) as error:
                raise InvalidInput(str(error)) from None
        else:
            data = _plain(payload)
        return self._sized(data, f"payload of signal {name!r}")

    @_schema_explained
    async def resume(self, run_id: RunId) -> bool:
        """Make a quarantined run's decision due again with a clean failure count (after
        fixing what made it fail); False if the run is not quarantined. Raises
        ``RunNotFound`` for an unknown run."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)
        async with self.engine.begin() as conn:
            if await decide_queue.resume(conn, shard, run_id):
                return True
            if await runs.get(conn, shard, run_id) is None:
                raise RunNotFound(f"no run {run_id}")
        return False

    @_schema_explained
    async def list_quarantined(self, limit: int = 50) -> list[QuarantinedRun]:
        """Runs whose decisions failed too often in a row, most recently parked first,
        each with its last error (``legato runs list --quarantined``). Fan-out across
        shard keys: one statement over every key."""
        check_limit(limit)
        parked = await self._read(lambda conn: decide_queue.quarantined(conn, limit))
        return [quarantined_from_row(row) for row in parked]

    @_schema_explained
    async def cancel(self, run_id: RunId) -> None:
        """Ask a running run to cancel: pending work is cancelled, running tasks are
        interrupted, and the run finishes CANCELLED."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)
        async with self.engine.begin() as conn:
            await self._running(conn, shard, run_id, "cancel")
            await decide_queue.enqueue(conn, shard, [run_id], "cancel requested")
            if not await runs.request_cancel(conn, shard, run_id):
                raise RunFinished(f"run {run_id} has already finished; nothing to cancel")

    @contextlib.asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose statements each commit on their own: a read or a
        one-statement write costs one round trip, not BEGIN + statement + COMMIT."""
        async with self.engine.connect() as conn:
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")

    async def _read(self, read: Callable[[AsyncConnection], Awaitable[R]]) -> R:
        """Run ``read`` on an autocommit connection. Reads are safe to repeat, so one
        that meets a connection the server has closed (a database restart leaves the
        pool's idle connections dead) is retried once on a fresh one."""
        try:
            async with self._autocommit() as conn:
                return await read(conn)
        except DBAPIError as error:
            if not error.connection_invalidated:
                raise
        async with self._autocommit() as conn:
            return await read(conn)

    async def _running(
        self, conn: AsyncConnection, shard: int, run_id: uuid.UUID, what: str
    ) -> RunRow:
        run = await runs.get(conn, shard, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        if run.status is not RunStatus.RUNNING:
            raise RunFinished(f"cannot {what}: run {run_id} has already {run.status.value}")
        return run

    # -- reading -----------------------------------------------------------------------------

    @_schema_explained
    async def result(self, run_id: RunId, timeout: float | None = None) -> JsonValue:
        """Wait until the run finishes; return its JSON output or raise ``RunFailed``.

        Woken by the run's history events (LISTEN/NOTIFY), re-reading the run row every
        ``poll_interval`` seconds too in case a notification is lost."""
        run = await self._wait_finished(as_run_id(run_id), check_timeout(timeout))
        if run.status is RunStatus.SUCCEEDED:
            return run.output
        raise await self._run_failed(run)

    async def _wait_finished(self, run_id: uuid.UUID, timeout: float | None) -> RunRow:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        run = await self._finished(run_id)
        if run is not None:  # already finished: no LISTEN needed
            return run
        async with self._wakeups.watching(run_id) as wake:
            while True:
                wake.clear()
                run = await self._finished(run_id)  # after LISTEN: no finish falls in between
                if run is not None:
                    return run
                wait = self.poll_interval
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        raise TimeoutError(f"run {run_id} is still running after {timeout}s")
                if not await woken(wake, wait):
                    await self._wakeups.relisten()

    async def _finished(self, run_id: uuid.UUID) -> RunRow | None:
        """The run's row once it has finished; None while it runs."""
        shard = await self._shard_of(run_id)
        run = await self._read(lambda conn: runs.get(conn, shard, run_id))
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        return None if run.status is RunStatus.RUNNING else run

    async def _run_failed(self, run: RunRow) -> RunFailed:
        """``RunFailed`` for a finished run that did not succeed; a failure's history is
        read (only on this path) for the node attempt that failed it."""
        error = run_from_row(run).error
        history = [] if error is None else [e async for e in self._pages(run.id, 0)]
        return run_failed(run.id, run.status, error, history)

    async def _pages(self, run_id: uuid.UUID, after_seq: int) -> AsyncIterator[HistoryEvent]:
        """The run's events after ``after_seq``, read page by page to the current end."""
        shard = await self._shard_of(run_id)
        while True:
            page = await self._read(
                partial(
                    run_events.history,
                    shard=shard,
                    run_id=run_id,
                    after_seq=after_seq,
                    limit=_HISTORY_PAGE,
                )
            )
            for row in page:
                yield event_from_row(row)
                after_seq = row.seq
            if len(page) < _HISTORY_PAGE:
                return

    async def follow(self, run_id: RunId, after_seq: int = 0) -> AsyncGenerator[HistoryEvent, None]:
        """The run's history events after ``after_seq``, then each new one as it is
        appended, until the run has finished (its last event yielded).

        New events are read by seq when the run_events NOTIFY arrives, and every
        ``poll_interval`` seconds in case one is lost, so none is missed or repeated; to
        resume after a break, pass the last seq seen. Raises ``RunNotFound`` for an
        unknown run before yielding anything."""
        events = self._follow(run_id, after_seq)
        try:
            async for event in events:
                yield event
        except DBAPIError as error:
            await self._explain(error)
            raise
        finally:
            await events.aclose()

    async def _follow(self, run_id: RunId, after_seq: int) -> AsyncGenerator[HistoryEvent, None]:
        run_id = as_run_id(run_id)
        seq = check_after_seq(after_seq)
        shard = await self._shard_of(run_id)
        if await self._read(lambda conn: runs.get(conn, shard, run_id)) is None:
            raise RunNotFound(f"no run {run_id}")
        async with self._wakeups.watching(run_id) as wake:
            finished = False
            while True:
                wake.clear()
                ended = False
                async for event in self._pages(run_id, seq):
                    yield event
                    seq = event.seq
                    ended = ended or event.type in FINAL_EVENTS
                if ended or finished:
                    return
                if not await woken(wake, self.poll_interval):
                    await self._wakeups.relisten()
                    # A run can finish without a final event we saw (or the NOTIFY was
                    # lost): read its status, then read the history once more.
                    finished = await self._finished(run_id) is not None

    @_schema_explained
    async def get_run(self, run_id: RunId) -> RunDetails:
        """A run with its attempts and history (``legato runs show``)."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)

        async def read(conn: AsyncConnection) -> RunDetails:
            run = await runs.get(conn, shard, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            rows = (await tasks.load_many(conn, shard, [run_id]))[run_id]
            events = await run_events.history(conn, shard, run_id)
            return RunDetails(
                run=run_from_row(run),
                tasks=[attempt_from_row(row) for row in rows],
                history=[event_from_row(e) for e in events],
            )

        return await self._read(read)

    @_schema_explained
    async def history(self, run_id: RunId, after_seq: int = 0) -> list[HistoryEvent]:
        """A run's history events after ``after_seq`` (at most 10,000; page on by seq)."""
        run_id = as_run_id(run_id)
        seq = check_after_seq(after_seq)
        shard = await self._shard_of(run_id)
        page = await self._read(lambda conn: run_events.history(conn, shard, run_id, seq))
        return [event_from_row(row) for row in page]

    @_schema_explained
    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | None = None,
        before: RunId | None = None,
        limit: int = 50,
    ) -> RunPage:
        """Runs newest first, filtered, keyset-paginated by run id. Fan-out across shard
        keys: each page is one statement over every key, in run-id order."""
        check_limit(limit)
        if workflow is not None:
            check_name("workflow name", workflow, InvalidArgument)
        if status is not None:
            status = run_status(status)
        after = None if before is None else as_run_id(before)
        page = await self._read(
            lambda conn: runs.list_runs(
                conn, workflow_name=workflow, status=status, before=after, limit=limit + 1
            )
        )
        more = len(page) > limit
        page = page[:limit]
        return RunPage(
            runs=[run_from_row(row) for row in page],
            next_before=page[-1].id if more and page else None,
        )


def _check_connection(connection: object) -> None:
    if connection is not None and not isinstance(connection, AsyncConnection):
        raise InvalidArgument(
            f"connection={connection!r} must be an AsyncConnection in the caller's "
            "transaction (async with engine.begin() as conn), or None"
        )


def _plain(value: object) -> JsonValue:
    """A model instance as the JSON it will be stored as; anything else as it is (the
    JSON check that follows refuses what is not JSON)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value  # type: ignore[return-value]


def _typed(workflow: object) -> Workflow[Any, Any] | None:
    return workflow if isinstance(workflow, Workflow) else None
