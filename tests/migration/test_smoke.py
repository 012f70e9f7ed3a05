from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import HEAD_REVISION
from legato.schema import SchemaVersion


async def test_template_is_migrated(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        versions = (await conn.execute(select(SchemaVersion.version_num))).scalars().all()
    assert versions == [HEAD_REVISION]
