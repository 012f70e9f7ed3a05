"""NOTIFY channels: hints that wake a loop early. Every loop also polls, so a lost
notification delays work, it never loses it."""

from __future__ import annotations

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


def events_channel(schema: str) -> str:
    """Raised by the run_events trigger with payload ``<run_id>:<seq>``."""
    return f"{schema}_events_v1"


async def send(conn: AsyncConnection, channel: str) -> None:
    """NOTIFY ``channel``, delivered when the transaction commits.

    Most wake-ups come from the queue tables' statement triggers; this is for the two
    that are not inserts into a queue: the decider's cancelled attempts (cancel
    channel) and a stopping worker's released leases (tasks channel).
    """
    await conn.execute(select(func.pg_notify(channel, "")))
