"""Storing compiled workflow specs as versions: same spec, same version; a changed spec
becomes the next version. Runs in flight keep the version they started on."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.loops.schedules import deploy_schedules, utc_now
from legato.engine.repositories import definitions
from legato.flow import App, WorkflowDefinition, resolve_version


async def store_version(
    conn: AsyncConnection, workflow: WorkflowDefinition, *, deploy: bool
) -> int:
    """The version of ``workflow``'s spec, storing it if new.

    ``deploy=True`` makes it the version new runs started by name use; otherwise it is
    marked deployed only if the workflow has no deployed version yet.
    """
    stored = await definitions.stored_hashes(conn, workflow.name)
    decision = resolve_version(stored, workflow.spec_hash)
    if decision.is_new:
        await definitions.insert_version(
            conn,
            workflow.name,
            decision.version,
            workflow.spec.model_dump(mode="json"),
            workflow.spec_hash,
        )
    if deploy or await definitions.deployed_version(conn, workflow.name) is None:
        await definitions.mark_deployed(conn, workflow.name, decision.version)
    return decision.version


async def deploy_workflows(
    conn: AsyncConnection, workflows: Iterable[WorkflowDefinition]
) -> dict[str, int]:
    """Store and mark deployed every workflow (children included), and its schedules;
    name -> version."""
    ordered = sorted(App(workflows).workflows.values(), key=lambda w: w.name)
    versions = {
        workflow.name: await store_version(conn, workflow, deploy=True) for workflow in ordered
    }
    await deploy_schedules(conn, ordered, utc_now())
    return versions
