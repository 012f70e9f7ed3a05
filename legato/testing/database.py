"""Server-level helpers of the test fixtures: databases made and dropped by URL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import create_async_engine

from legato.db import resolve_url


def docker_available() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


def database_url(server_url: str, database: str) -> str:
    """The URL of ``database`` on the server at ``server_url``."""
    return resolve_url(server_url).set(database=database).render_as_string(hide_password=False)


async def admin(server_url: str, statement: str) -> None:
    """Run one statement outside a transaction (CREATE / DROP DATABASE)."""
    engine = create_async_engine(resolve_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()
