"""What every background loop shares: waiting for a wake-up (``legato.engine.transport.wakeups``)
or its poll interval, error back-off, crash supervision and a graceful stop.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from legato.arguments import check_count, check_seconds
from legato.engine.decider.backoff import exponential
from legato.engine.transport.wakeups import Wakeups
from legato.errors import ConfigurationError, LoopFailed
from legato.outages import database_failure, is_database_error, one_line, traceback_at_debug

log = logging.getLogger("legato")

# A tick failing on the database waits 0.1 s, doubling per failure in a row, up to 5 s.
_FIRST_TICK_RETRY = 0.1
_MAX_TICK_RETRY = 5.0


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
        if self.first_delay > self.max_delay:
            raise ConfigurationError(
                f"RestartPolicy(first_delay={self.first_delay!r}) is longer than its "
                f"max_delay={self.max_delay!r}: the delay starts at first_delay and doubles "
                "up to max_delay"
            )

    def delay(self, crashes: int) -> float:
        """Seconds before restarting after the ``crashes``-th crash in a row."""
        return exponential(self.first_delay, crashes, self.max_delay)


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


class Loop:
    """A loop that does ``tick()`` until stopped; waits for a NOTIFY or ``poll_interval``
    between ticks that found less than a full batch. Supervised (see the module doc)."""

    name = "loop"

    def __init__(
        self,
        *,
        poll_interval: float,
        wakeups: Wakeups | None,
        channel: str | None,
        restarts: RestartPolicy | None = None,
    ):
        self.poll_interval = poll_interval
        # How often work due "once a poll" is done: a tenth of slack, since the poll's
        # sleep may end a clock tick early.
        self.once_a_poll = poll_interval * 0.9
        self.restarts = restarts or RestartPolicy()
        self._wakeups = wakeups
        self._channel = channel
        self._wake: asyncio.Event | None = None
        self._nudged = asyncio.Event()  # the wake-up of a loop that does not LISTEN
        self._stopping = asyncio.Event()

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
                backoff = exponential(_FIRST_TICK_RETRY, failed_ticks, _MAX_TICK_RETRY)
                log.warning(
                    "%s: tick failed (%s); retrying in %.1fs",
                    self.name,
                    database_failure(error),
                    backoff,
                    exc_info=traceback_at_debug(log, error),
                )
                await self._sleep(backoff)
                continue
            if failed_ticks:
                log.info("%s: working again after %d failed ticks", self.name, failed_ticks)
                failed_ticks = 0
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
