"""``workflow_definitions``: compiled specs, versioned by content hash, never deleted."""

from __future__ import annotations

from pydantic import JsonValue
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.schema import WorkflowDefinitions


async def stored_hashes(conn: AsyncConnection, name: str) -> dict[int, str]:
    """Every stored version of ``name`` and its spec hash (deploy, Client.start of a
    workflow object), read under a transaction-scoped advisory lock per name so
    concurrent deploys number versions one at a time. Primary key."""
    await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext("legato-def:" + name))))
    result = await conn.execute(
        select(WorkflowDefinitions.version, WorkflowDefinitions.spec_hash).where(
            WorkflowDefinitions.name == name
        )
    )
    return dict(result.all())


async def insert_version(
    conn: AsyncConnection, name: str, version: int, spec: JsonValue, spec_hash: str
) -> None:
    """Store a new version of a spec (deploy, Client.start). Primary key."""
    await conn.execute(
        insert(WorkflowDefinitions.table).values(
            name=name, version=version, spec=spec, spec_hash=spec_hash
        )
    )


async def mark_deployed(conn: AsyncConnection, name: str, version: int) -> None:
    """Make ``version`` the one new runs of ``name`` use (deploy). Runs in flight keep
    theirs. Served by the primary key and ``ix_workflow_definitions_name``; three
    statements (the first deployment's time kept by the last)."""
    await conn.execute(
        update(WorkflowDefinitions.table)
        .where(
            WorkflowDefinitions.name == name,
            WorkflowDefinitions.deployed,
            WorkflowDefinitions.version != version,
        )
        .values(deployed=False)
    )
    this_version = (WorkflowDefinitions.name == name, WorkflowDefinitions.version == version)
    await conn.execute(update(WorkflowDefinitions.table).where(*this_version).values(deployed=True))
    # The first deployment's time stays; apart, since Citus refuses ``now()`` inside a
    # COALESCE of a reference table's update.
    await conn.execute(
        update(WorkflowDefinitions.table)
        .where(*this_version, WorkflowDefinitions.deployed_at.is_(None))
        .values(deployed_at=func.now())
    )


async def deployed_version(conn: AsyncConnection, name: str) -> int | None:
    """The deployed version of ``name`` (Client.start by name, child runs). Served by
    the partial unique index ``ix_workflow_definitions_name``."""
    result = await conn.execute(
        select(WorkflowDefinitions.version).where(
            WorkflowDefinitions.name == name,
            WorkflowDefinitions.deployed,
        )
    )
    return result.scalar_one_or_none()


async def load_spec(conn: AsyncConnection, name: str, version: int) -> JsonValue | None:
    """A version's spec (decider loop, cached by (name, version)). Primary key."""
    result = await conn.execute(
        select(WorkflowDefinitions.spec).where(
            WorkflowDefinitions.name == name, WorkflowDefinitions.version == version
        )
    )
    return result.scalar_one_or_none()
