"""A client's wake-ups for runs it waits on (``result()``, ``follow()``).

The ``run_events`` trigger NOTIFYs ``<schema>_events_v1`` with ``<run_id>:<seq>`` items
(``notify.event_runs``) for the events each statement appended after a run's first. A
client LISTENs once, on the first wait, and keeps that one connection until it is
closed; each waiter gets an ``asyncio.Event`` set when its run has a new event. A
notification is only a hint: a waiter re-reads by seq (or the run row) after each one
and also on its poll interval, so a lost notification or a
dropped listen connection delays a waiter, never loses an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import listen_engine
from legato.engine.repositories import notify
from legato.engine.transport.wakeups import Wakeups

log = logging.getLogger("legato.client")


class RunWakeups:
    """Per-run events fed by the client's one LISTEN on the run_events channel."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._channel = notify.events_channel(schema)
        self._wakeups: Wakeups | None = None
        self._listener = engine  # the engine of the LISTEN connection (listen_engine)
        self._waiters: defaultdict[uuid.UUID, set[asyncio.Event]] = defaultdict(set)

    def _on_payload(self, payload: str) -> None:
        for run_id in notify.event_runs(payload):
            try:
                waiters = self._waiters.get(uuid.UUID(run_id), ())
            except ValueError:  # not one of ours
                continue
            for event in waiters:
                event.set()

    @contextlib.asynccontextmanager
    async def watching(self, run_id: uuid.UUID) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``run_id`` has a new history event. It is listened for
        before this yields: read after entering, and nothing appended later is missed."""
        event = asyncio.Event()
        self._waiters[run_id].add(event)
        try:
            await self._listen()
            yield event
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[run_id]

    async def _listen(self) -> None:
        if self._wakeups is None:
            listener = listen_engine(self._engine)
            if listener is None:  # behind a transaction pooler with no listen URL: poll
                return
            self._listener = listener
            self._wakeups = Wakeups(listener)
            await self._wakeups.subscribe(self._channel, self._on_payload)
        else:
            await self.relisten()

    async def relisten(self) -> None:
        """Re-open the listen connection if it died (between polls of a waiter)."""
        if self._wakeups is not None:
            await self._wakeups.try_listening(log, "cannot LISTEN for run events")

    async def close(self) -> None:
        if self._wakeups is not None:
            await self._wakeups.close()
            if self._listener is not self._engine:
                await self._listener.dispose()
            self._wakeups = None


async def woken(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True
