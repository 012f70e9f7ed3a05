"""What every part of the ``Client`` shares: its engine and schema, the installation's
shard keys, reads that retry once on a fresh connection, the payload checks, and the
typed error for a schema that is not at this package's head."""

from __future__ import annotations

import contextlib
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import timedelta
from functools import wraps
from typing import Any, Concatenate, ParamSpec, TypeVar

from pydantic import JsonValue
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.arguments import check_duration, check_max_payload, check_poll_interval
from legato.db.schema_names import engine_schema
from legato.db.server_check import check_database, connect, missing_relation
from legato.engine.repositories import runs
from legato.engine.repositories.runs import RunRow
from legato.engine.transport.driver import DriverStatements
from legato.errors import (
    ClientClosed,
    ConfigurationError,
    InvalidInput,
    LegatoError,
    PayloadTooLarge,
    RunFinished,
    RunNotFound,
)
from legato.flow import App
from legato.limits import check_json, json_size
from legato.outages import as_unavailable
from legato.run_wakeups import RunWakeups
from legato.schema import RunStatus, Shards
from legato.schema.types import strip_nul
from legato.starting import SpecVersions

R = TypeVar("R")
P = ParamSpec("P")
C = TypeVar("C", bound="ClientBase")

DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
# How often a waiting result() or follow() reads again when no notification arrives.
DEFAULT_POLL_INTERVAL = 1.0

# An idempotency key kept longer than this would outlive any sensible retry.
_MAX_RETENTION = timedelta(days=3660)
# How many runs' workflow names a Client remembers for signal().
_REMEMBERED_RUNS = 10_000


def schema_explained(
    method: Callable[Concatenate[C, P], Awaitable[R]],
) -> Callable[Concatenate[C, P], Coroutine[Any, Any, R]]:
    """A ``Client`` method whose failures are the typed errors saying what to do, not
    the driver's: ``ClientClosed`` after ``close()``; ``DatabaseUnavailable`` when the
    database cannot be reached; the schema's state (``ClientBase._explain``) for a
    statement on a table the schema lacks."""

    @wraps(method)
    async def explained(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._check_open()
        try:
            return await method(self, *args, **kwargs)
        except DBAPIError as error:
            await self._explain(error)
            unavailable = as_unavailable(error, self.engine.url)
            if unavailable is not None:
                raise unavailable from error
            raise
        except OSError as error:  # the driver's connect, before SQLAlchemy wraps anything
            if isinstance(error, LegatoError):  # ResultTimeout: a TimeoutError, not an outage
                raise
            unavailable = as_unavailable(error, self.engine.url)
            if unavailable is not None:
                raise unavailable from error
            raise

    return explained


class ClientBase:
    """The state and plumbing of a ``Client``; its parts (``starts.py``, ``reads.py``,
    ``controls.py``) build on it."""

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
        self._closed = False
        self._wakeups = RunWakeups(engine, self.schema)
        self._versions = SpecVersions()
        self._driver = DriverStatements(engine)
        self._bounds: list[tuple[uuid.UUID, uuid.UUID]] | None = None
        # The installation's shard keys: from check_database at connect, else read on
        # first use (a client made from an engine). Fixed for the schema's lifetime.
        self._shards = shards
        # A run's workflow never changes: signalling a run this client started or
        # signalled before needs no read (``_remember_workflow``).
        self._workflow_of: OrderedDict[uuid.UUID, str] = OrderedDict()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(
                "this Client was closed: make a new one (Client.connect(...) or "
                "Client(engine)), or close it only when done with it"
            )

    def _remember_workflow(self, run_id: uuid.UUID, workflow_name: str) -> None:
        """Remember run ``run_id``'s workflow (it never changes), so a signal to it
        checks its payload without reading the run: one round trip (the most recent
        ``_REMEMBERED_RUNS`` runs this client started or signalled)."""
        remembered = self._workflow_of
        remembered[run_id] = workflow_name
        remembered.move_to_end(run_id)
        if len(remembered) > _REMEMBERED_RUNS:
            remembered.popitem(last=False)

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

    def _sized(self, payload: JsonValue, what: str) -> JsonValue:
        payload = strip_nul(check_json(what, payload, InvalidInput))
        size = json_size(payload)
        if size > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"{what} is {size} bytes, over the {self.max_payload_bytes}-byte limit "
                "(Client(max_payload_bytes=...) raises it)"
            )
        return payload


def plain_json(value: object) -> JsonValue:
    """A model instance as the JSON it will be stored as; anything else as it is (the
    JSON check that follows refuses what is not JSON)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value  # type: ignore[return-value]
