"""The JSONB funnel on a real row: PostgreSQL rejects ``\\u0000``, so it never reaches it."""

from __future__ import annotations

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.schema import Installation, Runs, RunStatus, Shards, WorkflowDefinitions, uuid7


async def test_nul_bearing_payload_is_stored_without_the_nul(engine: AsyncEngine) -> None:
    run_id = uuid7()
    payload = {"na\x00me": "a\x00b", "items": ["\x00", {"deep\x00": "x\x00y"}]}
    async with engine.begin() as conn:
        count = (await conn.execute(select(Installation.shard_count))).scalar_one()
        await conn.execute(
            insert(WorkflowDefinitions.table).values(
                name="nul", version=1, spec={"doc": "s\x00pec"}, spec_hash="h"
            )
        )
        await conn.execute(
            insert(Runs.table).values(
                id=run_id,
                workflow_name="nul",
                workflow_version=1,
                status=RunStatus.RUNNING,
                input=payload,
                shard=Shards(count).of_run(run_id),
            )
        )
    async with engine.connect() as conn:
        stored = (await conn.execute(select(Runs.input).where(Runs.id == run_id))).scalar_one()
        raw = (
            await conn.exec_driver_sql(
                "SELECT input::text FROM legato.runs WHERE id = $1", (run_id,)
            )
        ).scalar_one()
        spec = (
            await conn.execute(
                select(WorkflowDefinitions.spec).where(WorkflowDefinitions.name == "nul")
            )
        ).scalar_one()
    assert stored == {"name": "ab", "items": ["", {"deep": "xy"}]}
    assert "\\u0000" not in raw
    assert spec == {"doc": "spec"}
