"""NOTIFY channels: hints that wake a loop early. Every loop also polls, so a lost
notification delays work, it never loses it."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.schema import SCHEMA_PLACEHOLDER


def schema_of(conn: AsyncConnection) -> str:
    """The real schema name the connection's engine maps ``legato`` to."""
    mapping = (
        conn.sync_connection.get_execution_options().get("schema_translate_map") or {}
        if conn.sync_connection
        else {}
    )
    return str(mapping.get(SCHEMA_PLACEHOLDER, SCHEMA_PLACEHOLDER))


def decide_channel(schema: str) -> str:
    return f"{schema}_decide_v1"


def tasks_channel(schema: str) -> str:
    return f"{schema}_tasks_v1"


def cancel_channel(schema: str) -> str:
    """Raised by the decider when it cancels attempts, so workers stop them at once."""
    return f"{schema}_cancel_v1"


def shard_owners_channel(schema: str) -> str:
    """Raised by a shard lease round that changed a role's members or keys (a member
    joined, left, gave keys up or took them), so the role's other members run their
    rounds at once instead of a third of a lease later."""
    return f"{schema}_owners_v1"


def events_channel(schema: str) -> str:
    """Raised by the run_events trigger: see :func:`event_runs` for its payload."""
    return f"{schema}_events_v1"


def event_runs(payload: str) -> list[str]:
    """The run ids (as text) an events channel payload names (pure): ``<run_id>:<seq>``
    items joined by spaces, one notification per up to 100 runs of a statement
    (migration 0016; a payload of one item before it)."""
    return [item.partition(":")[0] for item in payload.split()]


async def send(conn: AsyncConnection, channel: str, payload: str = "") -> None:
    """NOTIFY ``channel`` with ``payload``, delivered when the transaction commits.

    Most wake-ups come from the queue tables' statement triggers (whose payload is the
    shard key with new work); this is for those that are not inserts into a queue:
    the decider's cancelled attempts (cancel channel), a stopping worker's released
    leases (tasks channel, payload the key released: an empty payload wakes every key),
    and a shard lease round that changed its role (shard owners channel).
    """
    await conn.execute(select(func.pg_notify(channel, payload)))


def shards_of(payload: str, held: Sequence[int]) -> Sequence[int]:
    """The held keys a queue NOTIFY's ``payload`` names (pure): the one key it carries
    if held (none if not), every held key when it is empty or not a key."""
    try:
        shard = int(payload)
    except ValueError:
        return held
    return (shard,) if shard in held else ()
