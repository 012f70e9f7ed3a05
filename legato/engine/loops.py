"""What every background loop shares: LISTEN/NOTIFY wake-ups with a polling fallback,
error back-off, and a graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger("legato")


class Wakeups:
    """One LISTEN connection per process; loops wait on its per-channel events.

    A notification is a hint: loops also poll, so a lost one (or a dropped listen
    connection, which is re-opened) only delays work.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._events: dict[str, list[asyncio.Event]] = defaultdict(list)
        self._payload_handlers: dict[str, list[Callable[[str], None]]] = defaultdict(list)
        self._conn: AsyncConnection | None = None
        self._listening: set[str] = set()
        self._lock = asyncio.Lock()

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        for event in self._events.get(channel, ()):
            event.set()
        for handler in self._payload_handlers.get(channel, ()):
            handler(payload)

    async def subscribe(
        self, channel: str, on_payload: Callable[[str], None] | None = None
    ) -> asyncio.Event:
        """An event set whenever ``channel`` is notified (and an optional payload hook)."""
        event = asyncio.Event()
        self._events[channel].append(event)
        if on_payload is not None:
            self._payload_handlers[channel].append(on_payload)
        await self._listen(channel)
        return event

    async def unsubscribe(self, channel: str, event: asyncio.Event) -> None:
        with contextlib.suppress(ValueError):
            self._events[channel].remove(event)

    async def _listen(self, channel: str) -> None:
        async with self._lock:
            if channel not in self._listening:
                await (await self._driver()).add_listener(channel, self._on_notify)
                self._listening.add(channel)

    async def _driver(self) -> Any:
        if self._conn is None:
            self._conn = await self._engine.connect()
            await self._conn.commit()
        raw = await self._conn.get_raw_connection()
        return raw.driver_connection

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
            self._listening.clear()

    async def reconnect_if_lost(self) -> None:
        """Re-open the listen connection if it died (a database restart, a killed
        backend) and listen again on every channel; called by the loops between polls,
        so notifications resume instead of leaving the loops on polling alone."""
        async with self._lock:
            if not self._listening:
                return
            if self._conn is not None and not (await self._driver()).is_closed():
                return
            log.warning("the LISTEN connection was lost; reconnecting")
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await self._conn.invalidate()
                self._conn = None
            driver = await self._driver()
            for channel in sorted(self._listening):
                await driver.add_listener(channel, self._on_notify)


class Loop:
    """A loop that does ``tick()`` until stopped; waits for a NOTIFY or ``poll_interval``
    between ticks that found less than a full batch."""

    name = "loop"

    def __init__(self, *, poll_interval: float, wakeups: Wakeups | None, channel: str | None):
        self.poll_interval = poll_interval
        self._wakeups = wakeups
        self._channel = channel
        self._wake: asyncio.Event | None = None
        self._nudged = asyncio.Event()  # the wake-up of a loop that does not LISTEN
        self._stopping = asyncio.Event()
        self._error_backoff = 0.0

    async def tick(self) -> bool:
        """Do one batch of work; return True when more work is likely waiting."""
        raise NotImplementedError

    def nudge(self) -> None:
        """Wake the loop now (another loop saw more work than it can take alone)."""
        (self._wake or self._nudged).set()

    def stop(self) -> None:
        """Ask the loop to finish: it stops claiming and returns from ``run``."""
        self._stopping.set()
        if self._wake is not None:
            self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        if self._wakeups is not None and self._channel is not None:
            self._wake = await self._wakeups.subscribe(self._channel)
        else:
            self._wake = self._nudged
        try:
            while not self._stopping.is_set():
                try:
                    busy = await self.tick()
                    self._error_backoff = 0.0
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self._error_backoff = min(max(self._error_backoff * 2, 0.1), 5.0)
                    log.exception(
                        "%s: tick failed; retrying in %.1fs", self.name, self._error_backoff
                    )
                    await self._sleep(self._error_backoff)
                    continue
                if not busy:
                    await self._sleep(self.poll_interval)
                    await self._keep_listening()
        finally:
            await self.on_stop()
            if self._wakeups is not None and self._channel is not None and self._wake is not None:
                await self._wakeups.unsubscribe(self._channel, self._wake)
            self._wake = None

    async def _keep_listening(self) -> None:
        if self._wakeups is None:
            return
        try:
            await self._wakeups.reconnect_if_lost()
        except Exception:
            log.warning("%s: cannot re-open the LISTEN connection yet; polling", self.name)

    async def on_stop(self) -> None:
        """Release what the loop holds (overridden by the worker)."""

    async def _sleep(self, seconds: float) -> None:
        wake = self._wake or self._stopping
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=seconds)
        if self._wake is not None:
            self._wake.clear()
