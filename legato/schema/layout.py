"""Which statement variants an engine's sessions take: the installation's layout.

A distributed install (Citus, ``legato.distributed``) sends the per-key statements of
``legato.engine.repositories.routed`` where the single-node statement would not be one
Citus router statement. The layout is read once per process (``check_database``) and
kept on the engine as an execution option, so every connection the engine hands out
carries it and a repository picks its variant without its callers passing the layout.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

ROUTED_OPTION = "legato_routed"


def mark_routed(engine: AsyncEngine) -> None:
    """From now on, ``engine``'s connections take the routed (distributed) variants."""
    engine.sync_engine.update_execution_options(**{ROUTED_OPTION: True})


def routed(conn: AsyncConnection) -> bool:
    """Whether ``conn`` (a connection of a distributed install's engine, or a caller's
    connection a client starts runs on, ``legato.starting.start_connection``) takes the
    routed variants."""
    sync = conn.sync_connection
    options = sync.get_execution_options() if sync is not None else {}
    return bool(options.get(ROUTED_OPTION, routed_engine(conn.engine)))


def routed_engine(engine: AsyncEngine) -> bool:
    """``routed`` for an engine (the driver path's statements)."""
    return bool(engine.sync_engine.get_execution_options().get(ROUTED_OPTION))
