"""A decider's way to sleep: set the sleep flags of its keys first (migration 0018).

Writers of decide_queue NOTIFY a key only while its flag says a decider sleeps, so a
decider must say so before it sleeps, and must not sleep while work it cannot see yet
may be committing (docs/design.md, "A NOTIFY only for a sleeping decider"). On Citus
the routed statements notify on their own (the triggers are gone) and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.decider.backoff import exponential
from legato.engine.repositories import decider_sleep
from legato.engine.repositories.decider_sleep import Settled
from legato.schema.layout import routed_engine

# While a writer is in flight the decider looks again after 1 ms, doubling up to 50 ms:
# a start commits within a few, a long transaction that started runs gets polled.
_FIRST_LOOK = 0.001
_LAST_LOOK = 0.05


class SleepGate:
    """Asks, when a decider's tick found nothing more, whether it may sleep."""

    def __init__(
        self,
        engine: AsyncEngine,
        poll_interval: float,
        on_asleep: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        # Called each time the flags are set: what this process must do before the
        # NOTIFY that ends the sleep can arrive (the decider's: forget stale absorbs).
        self._on_asleep = on_asleep
        self.enabled = not routed_engine(engine)
        self.most_between_looks = min(_LAST_LOOK, poll_interval)
        self.sleeps = 0  # times the flags were set (each allows one NOTIFY per key)
        self._unsettled = 0  # answers other than ASLEEP since the loop last decided a run
        self._decided = -1  # the loop's count of decided runs at the last call

    async def keep_ticking(
        self,
        keys: Collection[int],
        pause: Callable[[float], Awaitable[None]],
        decided: int,
        since: datetime | None = None,
    ) -> bool:
        """False when the decider may sleep (its keys' flags are set, or there are no
        flags here); True to tick again: at once when a run is due, after ``pause`` when
        a writer was in flight or the last look's due run was not the loop's to take (a
        sibling deciding it). ``decided`` is the loop's count of decided runs: the pause
        starts again from 1 ms once the loop made progress. ``since``: the loop's floor,
        where its takes start (``DeciderLoop._since``); the look for due work starts
        there too."""
        if not self.enabled or not keys:
            return False
        if decided != self._decided:
            self._decided, self._unsettled = decided, 0
        async with self.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            answer = await decider_sleep.settle(autocommit, list(keys), since)
        if answer is Settled.ASLEEP:
            self._unsettled = 0
            self.sleeps += 1
            if self._on_asleep is not None:
                self._on_asleep()
            return False
        self._unsettled += 1
        if answer is Settled.BUSY or self._unsettled > 1:
            await pause(exponential(_FIRST_LOOK, self._unsettled, self.most_between_looks))
        return True
