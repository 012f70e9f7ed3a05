"""A blocking client for threaded programs (Flask, Django, WSGI servers, scripts).

```python
client = SyncClient(app=app)                         # $LEGATO_DATABASE_URL
handle = client.start(signup, Signup(email="ada@example.com"))
client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
active = handle.result(timeout=30)
client.close()
```

An async engine's connections belong to the event loop that opened them, so a
module-level async ``Client`` driven by ``asyncio.run()`` per request fails on the
second request. ``SyncClient`` owns one private event loop on a daemon thread, opens
its engine there, and runs every call of every thread on it: the calls of many
threads share one pool and run concurrently on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncGenerator, Coroutine, Iterator, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from pydantic import JsonValue

from legato.arguments import RunId
from legato.client import Client, RunHandle
from legato.client.base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_POLL_INTERVAL
from legato.debounce import Debounce
from legato.errors import ClientClosed
from legato.flow import App, Workflow
from legato.models import HistoryEvent, QuarantinedRun, RunDetails, RunPage
from legato.schema import RunStatus

In = TypeVar("In")
Out = TypeVar("Out")
R = TypeVar("R")


class SyncRunHandle(Generic[Out]):
    """A started run: its id, and a blocking, typed wait for its result."""

    def __init__(self, client: SyncClient, handle: RunHandle[Out]) -> None:
        self.client = client
        self.run_id = handle.run_id
        self._handle = handle

    def result(self, timeout: float | None = None) -> Out:
        """Block until the run finishes; its output decoded, or ``RunFailed``."""
        return self.client._call(self._handle.result(timeout))

    def __repr__(self) -> str:
        return f"<run {self.run_id}>"


class SyncClient:
    """``Client``'s methods, blocking; safe to call from any number of threads."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        app: App | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        """Connect (``LEGATO_DATABASE_URL`` by default) and check the server and schema,
        as ``Client.connect``; raises its errors here."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="legato-sync-client", daemon=True
        )
        self._thread.start()
        try:
            self.client: Client = self._call(
                Client.connect(
                    database_url,
                    schema=schema,
                    app=app,
                    max_payload_bytes=max_payload_bytes,
                    poll_interval=poll_interval,
                )
            )
        except BaseException:
            self._stop_loop()
            raise
        self._closed = False

    def _call(self, coroutine: Coroutine[Any, Any, R]) -> R:
        if self._loop.is_closed():
            coroutine.close()
            raise ClientClosed("this SyncClient is closed: create a new SyncClient to go on")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        """Dispose of the engine and stop the loop thread; later calls raise."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.client.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def deploy(self, app: App | None = None) -> dict[str, int]:
        """``Client.deploy``."""
        return self._call(self.client.deploy(app))

    @overload
    def start(
        self,
        workflow: Workflow[In, Out],
        input: In,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        shard_key: str | None = None,
        debounce: Debounce | None = None,
    ) -> SyncRunHandle[Out]: ...

    @overload
    def start(
        self,
        workflow: str,
        input: JsonValue,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        shard_key: str | None = None,
        debounce: Debounce | None = None,
    ) -> SyncRunHandle[JsonValue]: ...

    def start(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any,
        *,
        idempotency_key: str | None = None,
        run_id: RunId | None = None,
        start_at: datetime | None = None,
        shard_key: str | None = None,
        debounce: Debounce | None = None,
    ) -> SyncRunHandle[Any]:
        """``Client.start``."""
        handle: RunHandle[Any] = self._call(
            self.client.start(
                workflow,
                input,
                idempotency_key=idempotency_key,
                run_id=run_id,
                start_at=start_at,
                shard_key=shard_key,
                debounce=debounce,
            )
        )
        return SyncRunHandle(self, handle)

    def start_many(
        self, workflow: Workflow[In, Out], inputs: Sequence[In], *, shard_key: str | None = None
    ) -> list[SyncRunHandle[Out]]:
        """``Client.start_many``."""
        handles = self._call(self.client.start_many(workflow, inputs, shard_key=shard_key))
        return [SyncRunHandle(self, handle) for handle in handles]

    def signal(self, run_id: RunId, name: str, payload: Any = None) -> None:
        """``Client.signal``."""
        self._call(self.client.signal(run_id, name, payload))

    def emit(self, name: str, payload: Any = None) -> list[uuid.UUID]:
        """``Client.emit``."""
        return self._call(self.client.emit(name, payload))

    def cancel(self, run_id: RunId) -> None:
        """``Client.cancel``."""
        self._call(self.client.cancel(run_id))

    def result(self, run_id: RunId, timeout: float | None = None) -> JsonValue:
        """``Client.result``: block until the run finishes."""
        return self._call(self.client.result(run_id, timeout=timeout))

    def resume(self, run_id: RunId) -> bool:
        """``Client.resume``: make a quarantined run's decision due again."""
        return self._call(self.client.resume(run_id))

    def list_quarantined(self, limit: int = 50) -> list[QuarantinedRun]:
        """``Client.list_quarantined``."""
        return self._call(self.client.list_quarantined(limit))

    def get_run(self, run_id: RunId) -> RunDetails:
        """``Client.get_run``."""
        return self._call(self.client.get_run(run_id))

    def history(self, run_id: RunId, after_seq: int = 0) -> list[HistoryEvent]:
        """``Client.history``."""
        return self._call(self.client.history(run_id, after_seq))

    def follow(self, run_id: RunId, after_seq: int = 0) -> Iterator[HistoryEvent]:
        """``Client.follow``: the run's events, blocking for each new one, until the run
        has finished. Leaving the loop early stops following."""
        events = self.client.follow(run_id, after_seq)
        try:
            while True:
                event = self._call(_next(events))
                if event is None:
                    return
                yield event
        finally:
            if not self._loop.is_closed():
                self._call(events.aclose())

    def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | None = None,
        before: uuid.UUID | None = None,
        limit: int = 50,
    ) -> RunPage:
        """``Client.list_runs``."""
        return self._call(
            self.client.list_runs(workflow=workflow, status=status, before=before, limit=limit)
        )


async def _next(events: AsyncGenerator[HistoryEvent, None]) -> HistoryEvent | None:
    """The next event, or None when there are no more."""
    return await anext(events, None)
