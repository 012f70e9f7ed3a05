"""``check_deploy``: the runs in flight read page by page, each checked by the
``Assessment`` against the new app. The deploy check's one part that reads the database."""

from __future__ import annotations

import uuid

from pydantic import JsonValue, ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db.schema_names import engine_schema
from legato.db.server_check import check_database
from legato.deploy_check.assessment import Assessment
from legato.deploy_check.report import DeployReport, RunState
from legato.engine.repositories import definitions, in_flight
from legato.errors import InvalidArgument
from legato.flow import App
from legato.flow.spec import WorkflowSpec

PAGE_SIZE = 500


async def check_deploy(
    engine: AsyncEngine, app: App, *, page_size: int = PAGE_SIZE
) -> DeployReport:
    """Whether every run in flight (RUNNING, quarantined included) could finish if
    ``app`` replaced the code that runs it; see the module's docstring for what is
    checked. Reads only, a page of ``page_size`` runs per transaction.

    Raises ``InvalidArgument`` when ``app`` is not an ``App`` and
    ``IncompatibleDatabase`` when the schema is not migrated to this package's head.
    """
    if not isinstance(app, App):
        raise InvalidArgument(f"check_deploy() takes a legato.App, not {app!r}")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= 10_000
    ):
        raise InvalidArgument(f"page_size must be an int from 1 to 10000, not {page_size!r}")
    schema = engine_schema(engine, "check_deploy")
    assessment = Assessment(app)
    async with engine.connect() as conn:
        await check_database(conn, schema)
        await conn.commit()
        after: uuid.UUID | None = None
        while True:
            async with conn.begin():
                page = await in_flight.running_page(conn, after, page_size)
                if not page:
                    break
                progress = await in_flight.progress(conn, [r.run_id for r in page])
                for run in page:
                    key = (run.workflow_name, run.workflow_version)
                    if assessment.needs_spec(*key):
                        stored = await definitions.load_spec(conn, *key)
                        assessment.add_spec(*key, _spec(stored))
                    state = progress[run.run_id]
                    assessment.add_run(
                        run.run_id,
                        run.workflow_name,
                        run.workflow_version,
                        run.quarantined,
                        RunState(
                            run.input,
                            {k: (row.state, row.output) for k, row in state.rows.items()},
                            state.signals,
                        ),
                    )
            after = page[-1].run_id
    return assessment.report


def _spec(stored: JsonValue) -> WorkflowSpec | None:
    try:
        return WorkflowSpec.model_validate(stored)
    except (ValidationError, ValueError):
        return None
