"""LISTEN/NOTIFY wake-ups: one listening connection per process, a per-channel event
each loop waits on, and the absorbed notifications of work handed over in memory.

The queue triggers' payload is the shard key with new work (:func:`payload_shard`), so
a loop holding many keys takes from the one a wake-up names."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.outages import database_failure, is_database_error, traceback_at_debug

log = logging.getLogger("legato")


def payload_shard(payload: str) -> int | None:
    """The shard key a queue NOTIFY's payload names (pure): the key written as decimal
    text by the decide and task queue triggers, or None for an empty or unparsable
    payload (an older trigger, a hand-sent NOTIFY), which means "any key"."""
    text = payload.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        return None
    return int(text)


class Wakeups:
    """One LISTEN connection per process; loops wait on its per-channel events.

    A notification is a hint: loops also poll, so a lost one (or a dropped listen
    connection, which is re-opened between polls) only delays work; what was absorbed
    on a channel is forgotten when its LISTEN is (re-)established. Subscribing while
    the database is unreachable succeeds: the channel is listened on once it is back.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._events: dict[str, list[asyncio.Event]] = defaultdict(list)
        self._payload_handlers: dict[str, list[Callable[[str], None]]] = defaultdict(list)
        self._conn: AsyncConnection | None = None
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._lock = asyncio.Lock()
        # (channel, backend pid) -> notifications to drop: this process's own commits
        # whose work it already handed over in memory (legato.engine.transport.handoff).
        self._absorbed: Counter[tuple[str, int, str | None]] = Counter()

    def absorb(self, channel: str, pid: int, payload: str | None = None) -> None:
        """Drop the next notification on ``channel`` from backend ``pid`` (the next with
        ``payload``, when given: a transaction notifying once per key absorbs the keys it
        wakes in memory, and each arrives apart): the caller's transaction on that
        backend notifies at commit, and the caller wakes whoever it concerns in memory.
        Call before the commit; :meth:`unabsorb` if it fails."""
        self._absorbed[(channel, pid, payload)] += 1

    def unabsorb(self, channel: str, pid: int, payload: str | None = None) -> None:
        key = (channel, pid, payload)
        if self._absorbed[key] > 1:
            self._absorbed[key] -= 1
        else:
            self._absorbed.pop(key, None)

    def _on_notify(self, _conn: Any, pid: int, channel: str, payload: str) -> None:
        for absorbed in ((channel, pid, payload), (channel, pid, None)):
            if absorbed in self._absorbed:
                self.unabsorb(*absorbed)
                return
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
        self._wanted.add(channel)
        await self.try_listening(log, f"cannot LISTEN on {channel} yet")
        return event

    def listens(self, channel: str) -> bool:
        """Whether ``channel`` is LISTENed on now (for tests and diagnostics)."""
        return channel in self._listening

    async def try_listening(self, logger: logging.Logger, failure: str) -> None:
        """:meth:`ensure_listening` for a caller that polls anyway: a database error is
        logged as a warning starting with ``failure``, not raised."""
        try:
            await self.ensure_listening()
        except Exception as error:
            if not is_database_error(error):
                raise
            logger.warning(
                "%s (%s); polling",
                failure,
                database_failure(error),
                exc_info=traceback_at_debug(logger, error),
            )

    async def unsubscribe(
        self,
        channel: str,
        event: asyncio.Event,
        on_payload: Callable[[str], None] | None = None,
    ) -> None:
        """Forget what :meth:`subscribe` registered: the event, and its payload hook."""
        with contextlib.suppress(ValueError):
            self._events[channel].remove(event)
        if on_payload is not None:
            with contextlib.suppress(ValueError):
                self._payload_handlers[channel].remove(on_payload)

    async def _driver(self) -> Any:
        if self._conn is None:
            self._conn = await self._engine.connect()
            await self._conn.commit()
        raw = await self._conn.get_raw_connection()
        return raw.driver_connection

    async def close(self) -> None:
        # Dropped, not returned to the pool: still LISTENing, the connection would hand
        # this process's notifications to its next user.
        await self._drop()
        self._wanted.clear()

    async def ensure_listening(self) -> None:
        """LISTEN on every subscribed channel, re-opening the listen connection if it
        died (a database restart, a killed backend); called by the loops between polls,
        so notifications resume instead of leaving the loops on polling alone."""
        async with self._lock:
            if self._conn is not None and (await self._driver()).is_closed():
                log.warning("the LISTEN connection was lost; reconnecting")
                await self._drop()
            missing = sorted(self._wanted - self._listening)
            if not missing:
                return
            try:
                driver = await self._driver()
                for channel in missing:
                    await driver.add_listener(channel, self._on_notify)
                    self._listening.add(channel)
            except BaseException:
                await self._drop()  # half set up: start afresh next time
                raise
            # An absorb registered before these LISTENs took hold waits for a notification
            # sent while nothing listened, which never comes: kept, it would drop the next
            # real one from its backend (a pooled connection's: any later commit on it).
            # Forgetting one whose commit is still to come costs a loop an empty tick.
            self._forget_absorbed(missing)

    def forget_absorbed(
        self, channel: str, keep: Iterable[tuple[str, int, str | None]] = ()
    ) -> None:
        """Forget every notification absorbed on ``channel`` but those in ``keep`` (a
        decider whose sleep flags were just set: a report flush that committed before sent
        its NOTIFY already, or none because that decider was awake, and the latter's
        absorb would drop the next writer's NOTIFY from its pooled backend, the one that
        ends this sleep; ``keep``: the absorbs of flushes still under way, which may yet
        notify now that the flags are set). One forgotten while its notification is still
        on the way costs the loop an empty tick."""
        self._forget_absorbed([channel], keep)

    def _forget_absorbed(
        self, channels: Iterable[str], keep: Iterable[tuple[str, int, str | None]] = ()
    ) -> None:
        forgotten = set(channels)
        kept = Counter(keep)
        for key in [key for key in self._absorbed if key[0] in forgotten]:
            if kept[key]:
                self._absorbed[key] = min(self._absorbed[key], kept[key])
            else:
                del self._absorbed[key]

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.invalidate()
                await self._conn.close()
        self._conn = None
        self._listening.clear()


@contextlib.asynccontextmanager
async def payloads(
    wakeups: Wakeups | None, channel: str, on_payload: Callable[[str], None]
) -> AsyncIterator[None]:
    """Within the block, ``on_payload`` hears each notification on ``channel`` (nothing
    without ``wakeups``: the loop polls); a loop's ``run`` wraps its ticks in it."""
    if wakeups is None:
        yield
        return
    subscribed = await wakeups.subscribe(channel, on_payload=on_payload)
    try:
        yield
    finally:
        await wakeups.unsubscribe(channel, subscribed, on_payload)
