"""A decider's way to sleep: set the sleep flags of its keys first (migration 0018).

Writers of decide_queue NOTIFY a key only while its flag says a decider sleeps, so a
decider must say so before it sleeps, and must not sleep while work it cannot see yet
may be committing (docs/design.md, "A NOTIFY only for a sleeping decider"). On Citus
the routed statements notify on their own (the triggers are gone) and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

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

    def __init__(self, engine: AsyncEngine, poll_interval: float) -> None:
        self.engine = engine
        self.enabled = not routed_engine(engine)
        self.most_between_looks = min(_LAST_LOOK, poll_interval)
        self.sleeps = 0  # times the flags were set (each allows one NOTIFY per key)
        self._in_flight = 0  # BUSY answers in a row

    async def keep_ticking(
        self, keys: Collection[int], pause: Callable[[float], Awaitable[None]]
    ) -> bool:
        """False when the decider may sleep (its keys' flags are set, or there are no
        flags here); True to tick again: at once when a run is due, after ``pause``
        when a writer was in flight."""
        if not self.enabled or not keys:
            return False
        async with self.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            answer = await decider_sleep.settle(autocommit, list(keys))
        if answer is Settled.BUSY:
            self._in_flight += 1
            await pause(exponential(_FIRST_LOOK, self._in_flight, self.most_between_looks))
            return True
        self._in_flight = 0
        if answer is Settled.ASLEEP:
            self.sleeps += 1
            return False
        return True
