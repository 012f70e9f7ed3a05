"""``workflow_definitions``: compiled specs, versioned by content hash, never deleted."""

from __future__ import annotations

from pydantic import JsonValue
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.schema import WorkflowDefinitions


async def version_for(
    conn: AsyncConnection, name: str, spec_hash: str, spec: JsonValue
) -> tuple[int, bool]:
    """The version of ``name`` whose spec has ``spec_hash``, inserting the next version if
    the spec is new (deploy, Client.start of a workflow object). Returns (version, created).

    A transaction-scoped advisory lock per name serialises version numbering.
    Served by ``ix_workflow_definitions_name_spec_hash``.
    """
    existing = await conn.execute(
        select(WorkflowDefinitions.version).where(
            WorkflowDefinitions.name == name, WorkflowDefinitions.spec_hash == spec_hash
        )
    )
    version = existing.scalar_one_or_none()
    if version is not None:
        return version, False
    await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext("legato-def:" + name))))
    latest = await conn.execute(
        select(func.coalesce(func.max(WorkflowDefinitions.version), 0)).where(
            WorkflowDefinitions.name == name
        )
    )
    version = int(latest.scalar_one()) + 1
    inserted = await conn.execute(
        insert(WorkflowDefinitions.table)
        .values(name=name, version=version, spec=spec, spec_hash=spec_hash)
        .on_conflict_do_nothing(
            index_elements=[WorkflowDefinitions.name, WorkflowDefinitions.spec_hash]
        )
        .returning(WorkflowDefinitions.version)
    )
    if inserted.first() is None:  # a concurrent deploy inserted the same spec first
        return await version_for(conn, name, spec_hash, spec)
    return version, True


async def mark_deployed(conn: AsyncConnection, name: str, version: int) -> None:
    """Make ``version`` the one new runs of ``name`` use (deploy). Runs in flight keep
    theirs. Served by the primary key and ``ix_workflow_definitions_name``."""
    await conn.execute(
        update(WorkflowDefinitions.table)
        .where(
            WorkflowDefinitions.name == name,
            WorkflowDefinitions.deployed,
            WorkflowDefinitions.version != version,
        )
        .values(deployed=False)
    )
    await conn.execute(
        update(WorkflowDefinitions.table)
        .where(WorkflowDefinitions.name == name, WorkflowDefinitions.version == version)
        .values(
            deployed=True, deployed_at=func.coalesce(WorkflowDefinitions.deployed_at, func.now())
        )
    )


async def deployed_version(conn: AsyncConnection, name: str) -> int | None:
    """The deployed version of ``name`` (Client.start by name, child runs). Served by
    the partial unique index ``ix_workflow_definitions_name``."""
    result = await conn.execute(
        select(WorkflowDefinitions.version).where(
            WorkflowDefinitions.name == name,
            WorkflowDefinitions.deployed,
            WorkflowDefinitions.deleted_at.is_(None),
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
