"""What ``Client.start`` and ``start_many`` share once their arguments are checked: the
stored version of a spec the client starts, and the connection a start writes on (the
caller's, pointed at Legato's schema, or one of the client's own)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.deploy import store_version
from legato.errors import ConfigurationError
from legato.flow import App, WorkflowDefinition
from legato.flow.spec import WorkflowSpec
from legato.schema import SCHEMA_PLACEHOLDER
from legato.schema.layout import ROUTED_OPTION, routed_engine


class SpecVersions:
    """The stored version of each spec a client has seen committed, by name and spec hash."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], int] = {}
        # The last spec seen under each name and its hash: hashing a spec serialises
        # it (~80 µs), and a spec is frozen, so the same object hashes the same.
        self._hashes: dict[str, tuple[WorkflowSpec, str]] = {}

    def _key(self, workflow: WorkflowDefinition) -> tuple[str, str]:
        seen = self._hashes.get(workflow.name)
        if seen is None or seen[0] is not workflow.spec:
            seen = self._hashes[workflow.name] = (workflow.spec, workflow.spec_hash)
        return workflow.name, seen[1]

    def known(self, workflow: WorkflowDefinition) -> int | None:
        """The spec's remembered version; None if this client has not seen it commit."""
        return self._versions.get(self._key(workflow))

    def remember(self, workflow: WorkflowDefinition, version: int) -> None:
        self._versions[self._key(workflow)] = version

    async def version_of(self, conn: AsyncConnection, workflow: WorkflowDefinition) -> int:
        """The spec's stored version, storing it (and its children's) in ``conn``'s
        transaction if this client has not seen it commit. Not remembered here: a
        concurrent start that took the remembered version's one-statement path before
        this transaction commits would insert a run whose definition row is not yet
        visible; callers call ``remember`` once their transaction has committed."""
        version = self.known(workflow)
        if version is None:
            for child in App(workflow.children.values()).workflows.values():
                await store_version(conn, child, deploy=False)
            version = await store_version(conn, workflow, deploy=False)
        return version

    async def stored(self, engine: AsyncEngine, workflow: WorkflowDefinition) -> int:
        """The spec's version, stored in a transaction of the client's own: a version
        written in the caller's transaction would be remembered by this client even if
        the caller rolled it back. Storing a version is idempotent and harmless."""
        async with engine.begin() as conn:
            version = await self.version_of(conn, workflow)
        self.remember(workflow, version)
        return version


@contextlib.asynccontextmanager
async def start_connection(
    connection: AsyncConnection | None,
    own: Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]],
    schema: str,
    layout_of: AsyncEngine,
) -> AsyncIterator[AsyncConnection]:
    """The caller's connection, pointed at Legato's ``schema`` and taking the statement
    layout of the client's engine ``layout_of`` for the duration (and put back as it
    was: on a distributed install the start is routed on the caller's connection too),
    or one of the client's own from ``own``."""
    if connection is None:
        async with own() as conn:
            yield conn
        return
    if connection.dialect.driver != "asyncpg":
        raise ConfigurationError(
            f"connection= must be an asyncpg connection (postgresql+asyncpg://), "
            f"got driver {connection.dialect.driver!r}"
        )
    sync = connection.sync_connection
    options = {} if sync is None else sync.get_execution_options()
    before = options.get("schema_translate_map")
    await connection.execution_options(
        schema_translate_map={**(before or {}), SCHEMA_PLACEHOLDER: schema},
        **{ROUTED_OPTION: routed_engine(layout_of)},
    )
    try:
        yield connection
    finally:
        await connection.execution_options(
            schema_translate_map=before,
            **{ROUTED_OPTION: options.get(ROUTED_OPTION, routed_engine(connection.engine))},
        )
