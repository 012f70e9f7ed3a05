"""The live tail's wake-ups: one LISTEN connection on the ``run_events`` channel,
shared by every open event stream of the dashboard."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.client import Client
from legato.db import listen_engine
from legato.engine.repositories import notify
from legato.engine.transport.wakeups import Wakeups

log = logging.getLogger("legato.ui")


@dataclass
class Live:
    """One LISTEN connection on the run_events channel, shared by every open tail;
    each tail waits on its own event, set when its run's history grows."""

    client: Client
    watchers: dict[str, set[asyncio.Event]] = field(default_factory=dict)
    wakeups: Wakeups | None = None
    listener: AsyncEngine | None = None  # the LISTEN connection's engine (listen_engine)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _on_payload(self, payload: str) -> None:
        for run_id in notify.event_runs(payload):
            for event in self.watchers.get(run_id, ()):
                event.set()

    async def watch(self, run_id: uuid.UUID) -> asyncio.Event:
        event = asyncio.Event()
        self.watchers.setdefault(str(run_id), set()).add(event)
        async with self.lock:
            try:
                if self.wakeups is None:
                    self.listener = listen_engine(self.client.engine)
                    if self.listener is None:  # behind a transaction pooler without one
                        return event
                    self.wakeups = Wakeups(self.listener)
                    await self.wakeups.subscribe(
                        notify.events_channel(self.client.schema), self._on_payload
                    )
                else:
                    await self.wakeups.ensure_listening()
            except Exception as error:  # a hint only: the tail polls as well
                log.warning("cannot LISTEN for history (%s); polling instead", error)
        return event

    def unwatch(self, run_id: uuid.UUID, event: asyncio.Event) -> None:
        watching = self.watchers.get(str(run_id))
        if watching is not None:
            watching.discard(event)
            if not watching:
                del self.watchers[str(run_id)]

    async def close(self) -> None:
        if self.wakeups is not None:
            await self.wakeups.close()
            self.wakeups = None
        if self.listener is not None and self.listener is not self.client.engine:
            await self.listener.dispose()
        self.listener = None
