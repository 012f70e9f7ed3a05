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

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any, TypeVar, overload

from pydantic import JsonValue
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.arguments import RunId, check_max_payload, check_poll_interval
from legato.client import progress_stream
from legato.client.base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_POLL_INTERVAL
from legato.client.controls import RunControls
from legato.client.reruns import RunReruns
from legato.client.starts import StartingRuns
from legato.db import create_engine
from legato.db.schema_names import resolve_schema
from legato.db.server_check import check_database, connect
from legato.debounce import Debounce
from legato.errors import ConfigurationError
from legato.flow import App, Workflow
from legato.handle import RunHandle as RunHandle
from legato.progress import ProgressEntry

In = TypeVar("In")
Out = TypeVar("Out")


class Client(StartingRuns, RunControls, RunReruns):
    """Talks to Legato's tables; safe to share across tasks of one event loop.

    Its parts, by job: ``starts.py`` (starting runs), ``reads.py`` (results, history,
    the run list), ``controls.py`` (deploy, signal, emit, cancel, the quarantine),
    ``reruns.py`` (rerun, and the bulk actions by filter), over
    ``base.py`` (the engine, the shard keys, reads that retry)."""

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

    async def close(self) -> None:
        """Stop listening for run events; dispose of the engine if the client made it.
        A call on the client afterwards raises ``ClientClosed``."""
        self._closed = True
        await self._wakeups.close()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
        debounce: Debounce | None = None,
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
        debounce: Debounce | None = None,
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
        debounce: Debounce | None = None,
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

        With ``debounce`` (a ``legato.Debounce``: a key and a window), only the last
        call's input within the window runs: the run starts ``window`` after the latest
        call, each call while it is pending replaces its input and returns its handle,
        and a call after it started opens a new window (docs/api.md, "Debounce"). The
        window's key picks the shard unless ``shard_key`` is given; ``idempotency_key``,
        ``run_id`` and ``start_at`` do not go with it (``InvalidArgument``).
        """
        if debounce is not None:
            fixed = {"idempotency_key": idempotency_key, "run_id": run_id, "start_at": start_at}
            return await self._start_debounced(
                workflow, input, debounce, connection, shard_key, fixed
            )
        return await self._start_run(
            workflow, input, idempotency_key, run_id, start_at, connection, shard_key
        )

    def stream(self, run_id: RunId, after: int = 0) -> AsyncGenerator[ProgressEntry, None]:
        """The run's progress entries (``ctx.progress`` / ``ctx.stream`` in its tasks)
        after seq ``after``, in order, then each new one as it is written, until the run
        has finished. To resume after a break, pass the last ``entry.seq`` seen.
        ``RunNotFound`` for an unknown run (docs/api.md, "Streaming progress")."""
        return progress_stream.stream(self, run_id, after)
