"""``decider_sleep``: whether a decider sleeps on LISTEN, per shard key (migration 0018).

A writer of ``decide_queue`` (a start, a signal, a report, a timer) NOTIFYs a key only
when its flag is set, and clears it in the same statement (the queue's trigger); the
decider sets the flags of the keys it holds just before it sleeps. docs/design.md ("A
NOTIFY only for a sleeping decider") has why no wake-up is lost.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import DateTime, SmallInteger, Text, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import FAN_OUT
from legato.engine.repositories.partitions import schema_function


class Settled(enum.StrEnum):
    """What ``decider_sleeps_v2`` answered a decider about to sleep."""

    ASLEEP = "asleep"  # the flags are set: the next writer of each key notifies
    WORK = "work"  # a run is due: take it instead of sleeping
    BUSY = "busy"  # a writer is in flight: look again shortly (its commit may add work)


async def settle(
    conn: AsyncConnection, keys: Sequence[int], since: datetime | None = None
) -> Settled:
    """Set the sleep flag of every key in ``keys`` unless a run of theirs is due (from
    ``since`` on, the decider's floor, when given) or a writer of their decide_queue
    rows is in flight (decider loop, when a tick found nothing more to do). One call of
    ``decider_sleeps_v2`` (autocommit it at once: it holds every key's exclusive
    advisory lock to its transaction's end); its look for due work is served by
    ``ix_decide_queue_decider`` (shard, available_at), one range per key from
    ``since`` on, and the flags by their primary key. A fan-out: every key the loop
    holds."""
    keys_param = literal(sorted(keys), ARRAY(SmallInteger()))
    since_param = literal(since, DateTime(timezone=True))
    call = select(
        schema_function(conn, "decider_sleeps_v2", keys_param, since_param, type_=Text())
    )
    answer = await conn.scalar(call.prefix_with(FAN_OUT))
    return Settled(answer)
