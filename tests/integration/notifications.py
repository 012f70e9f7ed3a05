"""Listening to Legato's NOTIFY channels in a test, in commit order."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db.schema_names import engine_schema
from legato.engine.repositories import notify
from legato.engine.transport.wakeups import Wakeups
from tests.helpers import eventually


class Heard:
    """Every notification on the schema's decide, tasks and events channels, in order;
    ``settled`` waits for a sentinel sent after the commits under test, which the server
    delivers after their notifications (a listener gets them in commit order)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.schema = engine_schema(engine, "the test")
        self.wakeups = Wakeups(engine)
        self.got: list[tuple[str, str]] = []
        self.sentinel = f"{self.schema}_test_sentinel"
        self.decide_channel = notify.decide_channel(self.schema)
        self.tasks_channel = notify.tasks_channel(self.schema)

    async def __aenter__(self) -> Heard:
        for channel in (
            notify.decide_channel(self.schema),
            notify.tasks_channel(self.schema),
            notify.events_channel(self.schema),
            self.sentinel,
        ):
            await self.wakeups.subscribe(channel, self._heard(channel))
        return self

    def _heard(self, channel: str) -> Callable[[str], None]:
        return lambda payload: self.got.append((channel, payload))

    async def __aexit__(self, *_: object) -> None:
        await self.wakeups.close()

    async def settled(self) -> list[tuple[str, str]]:
        """The notifications of everything committed before this call, then cleared."""
        mark = uuid.uuid4().hex
        async with self.engine.begin() as conn:
            await conn.execute(select(func.pg_notify(self.sentinel, mark)))
        await eventually(lambda: (self.sentinel, mark) in self.got, "the sentinel")
        heard = self.got[: self.got.index((self.sentinel, mark))]
        del self.got[:]
        return heard

