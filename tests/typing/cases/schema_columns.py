"""Queries built from ``legato.schema`` are typed: a misspelt column is a mypy error."""

from typing import assert_type

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.schema import Runs, RunStatus

assert_type(select(Runs.status), Select[RunStatus])


async def status_of(conn: AsyncConnection) -> RunStatus:
    status = (await conn.execute(select(Runs.status))).scalar_one()
    assert_type(status, RunStatus)
    return status


select(Runs.staus)  # E: "RunsColumns" has no attribute "staus"; maybe "status"?
