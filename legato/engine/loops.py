"""What every background loop shares: LISTEN/NOTIFY wake-ups with a polling fallback,
error back-off, crash supervision and a graceful stop.

Two kinds of failure, two answers:

* a tick that fails on the database (an outage, a restart, a killed backend, a
  deadlock) is retried forever, backing off up to 5 s, one log line per failure;
* anything else escaping a tick (a bug) crashes the loop: it is logged at ERROR with
  its traceback and restarted after a back-off (in-flight work is left running), and
  after ``RestartPolicy.max_restarts`` crashes in a row the loop fails for good with
  ``LoopFailed`` (``Runtime.stop`` raises it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.arguments import check_count, check_seconds
from legato.db import outage
from legato.errors import DatabaseUnavailable, LoopFailed

log = logging.getLogger("legato")


def is_database_error(error: BaseException) -> bool:
    """Whether ``error`` came from the database or the connection to it: worth retrying
    as it is, unlike a bug in the code."""
    return isinstance(
        error,
        DBAPIError
        | DatabaseUnavailable
        | PoolTimeout
        | PendingRollbackError  # a connection that died inside a transaction
        | OSError
        | asyncpg.PostgresError
        | asyncpg.InterfaceError
        | asyncpg.exceptions.InternalClientError,  # a connection killed mid-operation
    )


def database_failure(error: BaseException) -> str:
    """A database error (``is_database_error``) as one log line: an outage says the
    database is unavailable and why in a few words, whichever layer raised it; any other
    (a deadlock, a killed backend) is named as ``one_line`` names it."""
    return outage(error) or one_line(error)


def one_line(error: BaseException) -> str:
    """An error as one log line: its type and the first line of its message (the
    driver's own error for a wrapped database error)."""
    cause = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__


def traceback_at_debug(logger: logging.Logger, error: BaseException) -> BaseException | None:
    return error if logger.isEnabledFor(logging.DEBUG) else None


@dataclass(frozen=True)
class RestartPolicy:
    """How a crashed loop (or a worker's side task) is restarted: after ``first_delay``
    seconds, doubling up to ``max_delay``; more than ``max_restarts`` crashes in a row
    (each within ``healthy_after`` seconds of the last restart) fail it for good."""

    max_restarts: int = 5
    first_delay: float = 0.5
    max_delay: float = 30.0
    healthy_after: float = 60.0

    def __post_init__(self) -> None:
        check_count("RestartPolicy(max_restarts)", self.max_restarts, least=0)
        for option in ("first_delay", "max_delay", "healthy_after"):
            check_seconds(f"RestartPolicy({option})", getattr(self, option))

    def delay(self, crashes: int) -> float:
        """Seconds before restarting after the ``crashes``-th crash in a row."""
        return min(self.first_delay * (1 << min(max(crashes - 1, 0), 30)), self.max_delay)


async def supervise(
    name: str,
    body: Callable[[], Awaitable[None]],
    policy: RestartPolicy,
    stopping: asyncio.Event,
) -> None:
    """Run ``body`` until it returns; restart it when it crashes, per ``policy``.

    Raises ``LoopFailed`` (chained to the last crash) once it has crashed more than
    ``policy.max_restarts`` times in a row; a ``LoopFailed`` from inside is passed on.
    """
    crashes = 0
    while True:
        started = time.monotonic()
        try:
            await body()
            return
        except (asyncio.CancelledError, LoopFailed):
            raise
        except Exception as error:
            if stopping.is_set():
                raise LoopFailed(f"the {name} failed while stopping: {one_line(error)}") from error
            if time.monotonic() - started >= policy.healthy_after:
                crashes = 0
            crashes += 1
            if crashes > policy.max_restarts:
                log.error("%s crashed %d times in a row; giving up", name, crashes, exc_info=error)
                raise LoopFailed(
                    f"the {name} crashed {crashes} times in a row (last: {one_line(error)}); "
                    "see the log for its traceback"
                ) from error
            delay = policy.delay(crashes)
            log.error(
                "%s crashed (%s); restarting in %.1fs", name, one_line(error), delay, exc_info=error
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=delay)
            if stopping.is_set():
                return


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
        # whose work it already handed over in memory (legato.engine.handoff).
        self._absorbed: Counter[tuple[str, int]] = Counter()

    def absorb(self, channel: str, pid: int) -> None:
        """Drop the next notification on ``channel`` from backend ``pid``: the caller's
        transaction on that backend notifies at commit, and the caller wakes whoever it
        concerns in memory. Call before the commit; :meth:`unabsorb` if it fails."""
        self._absorbed[(channel, pid)] += 1

    def unabsorb(self, channel: str, pid: int) -> None:
        key = (channel, pid)
        if self._absorbed[key] > 1:
            self._absorbed[key] -= 1
        else:
            self._absorbed.pop(key, None)

    def _on_notify(self, _conn: Any, pid: int, channel: str, payload: str) -> None:
        if (channel, pid) in self._absorbed:
            self.unabsorb(channel, pid)
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

    async def unsubscribe(self, channel: str, event: asyncio.Event) -> None:
        with contextlib.suppress(ValueError):
            self._events[channel].remove(event)

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
            for key in [key for key in self._absorbed if key[0] in missing]:
                del self._absorbed[key]

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.invalidate()
                await self._conn.close()
        self._conn = None
        self._listening.clear()


class Loop:
    """A loop that does ``tick()`` until stopped; waits for a NOTIFY or ``poll_interval``
    between ticks that found less than a full batch. Supervised (see the module doc)."""

    name = "loop"

    def __init__(self, *, poll_interval: float, wakeups: Wakeups | None, channel: str | None):
        self.poll_interval = poll_interval
        self.restarts = RestartPolicy()
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
        """Tick until stopped, restarting after crashes; then ``on_stop``. Raises
        ``LoopFailed`` when the loop crashed too often (after ``on_stop``)."""
        if self._wakeups is not None and self._channel is not None:
            self._wake = await self._wakeups.subscribe(self._channel)
        else:
            self._wake = self._nudged
        try:
            await supervise(f"{self.name} loop", self._ticking, self.restarts, self._stopping)
        finally:
            await self.on_stop()
            if self._wakeups is not None and self._channel is not None and self._wake is not None:
                await self._wakeups.unsubscribe(self._channel, self._wake)
            self._wake = None

    async def _ticking(self) -> None:
        failed_ticks = 0
        while not self._stopping.is_set():
            try:
                busy = await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not is_database_error(error):
                    raise  # a bug: a crash, for the supervisor
                failed_ticks += 1
                self._error_backoff = min(max(self._error_backoff * 2, 0.1), 5.0)
                log.warning(
                    "%s: tick failed (%s); retrying in %.1fs",
                    self.name,
                    database_failure(error),
                    self._error_backoff,
                    exc_info=traceback_at_debug(log, error),
                )
                await self._sleep(self._error_backoff)
                continue
            if failed_ticks:
                log.info("%s: working again after %d failed ticks", self.name, failed_ticks)
                failed_ticks = 0
            self._error_backoff = 0.0
            if not busy:
                await self._sleep(self.poll_interval)
                await self._keep_listening()

    async def _keep_listening(self) -> None:
        if self._wakeups is not None:
            await self._wakeups.try_listening(
                log, f"{self.name}: cannot re-open the LISTEN connection yet"
            )

    async def on_stop(self) -> None:
        """Release what the loop holds (overridden by the worker)."""

    async def _sleep(self, seconds: float) -> None:
        wake = self._wake or self._stopping
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=seconds)
        if self._wake is not None:
            self._wake.clear()
