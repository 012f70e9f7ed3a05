"""Core statements executed on the pooled connection's asyncpg driver connection.

Why: ``Client.start`` one at a time is a single autocommit statement whose own cost
on the server is a few hundred microseconds, and SQLAlchemy's async execute path
(the ``AsyncConnection`` and its greenlet bridge, the autocommit switch, parameter
processing, the result wrapper) added as much again per call. Here the statement
stays a Core construct (the schema is spelt once, in ``legato.schema``), compiled
once per engine to asyncpg's ``$n`` SQL text; each execution checks a connection out
of the engine's own pool, runs the text on the driver (asyncpg's prepared-statement
cache) outside any transaction, so it commits on its own, and returns the connection.

The errors stay those of the SQLAlchemy path: a constraint violation is raised as
``sqlalchemy.exc.IntegrityError`` (callers already turn it into ``RunAlreadyExists``),
another server error as ``DBAPIError``;
a pooled connection the server has closed (a restart, a terminated backend) is
invalidated and replaced before anything is sent; a connection lost while the
statement was in flight is invalidated and raised as ``DatabaseUnavailable``, since
the statement may or may not have committed; a connection whose statement was cancelled
is invalidated, not returned. Only statements whose parameters need no
SQLAlchemy bind processing belong here (scalars asyncpg encodes itself; JSON as text
cast in SQL; the statement's own constants are converted once):
``precompiled.compile_for_driver`` refuses the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import Executable
from sqlalchemy.util import greenlet_spawn

from legato.engine.repositories.precompiled import Compiled, compile_for_driver
from legato.errors import DatabaseUnavailable
from legato.outages import as_unavailable, outage_cause, where

# The driver's errors that mean the connection is gone (not that the statement failed).
_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, OSError)


class _Unsent(Exception):
    """The pooled connection is dead and the statement was not sent on it."""


class DriverStatements:
    """Executes Core statements on ``engine``'s pooled asyncpg connections (one client's)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._compiled: dict[Executable, Compiled] = {}

    def _compile(self, statement: Executable) -> Compiled:
        compiled = self._compiled.get(statement)
        if compiled is None:
            translate = self.engine.get_execution_options()["schema_translate_map"]
            compiled = self._compiled[statement] = compile_for_driver(
                self.engine.dialect, translate, statement
            )
        return compiled

    def compiled(self) -> list[str]:
        """The SQL text of every statement this driver has compiled so far, in the order
        first executed: what it sends, for diagnostics and the single-key statement test."""
        return [compiled.sql for compiled in self._compiled.values()]

    async def execute(
        self,
        statement: Executable,
        params: dict[str, Any],
        on_connection: Callable[[asyncpg.Connection], None] | None = None,
    ) -> list[asyncpg.Record]:
        """Execute ``statement`` with ``params`` as one autocommit statement; its rows
        as the driver returns them. ``on_connection`` is given the driver connection the
        statement is about to be sent on (again, should that one prove dead)."""
        compiled = self._compile(statement)
        args = compiled.args(params)
        while True:
            fairy = await self._checkout()
            try:
                return await self._run(fairy, compiled, args, params, on_connection)
            except _Unsent:
                # The server closed it while it idled in the pool: drop it, take the next.
                await greenlet_spawn(fairy.invalidate)
            except (DBAPIError, DatabaseUnavailable):
                raise  # the statement failed, or the connection was dropped already
            except BaseException:
                # Cancelled mid-statement: the driver may still be busy with it, so the
                # connection must not serve anyone else.
                await greenlet_spawn(fairy.invalidate)
                raise
            finally:
                if fairy.is_valid:
                    await greenlet_spawn(fairy.close)

    async def _run(
        self,
        fairy: PoolProxiedConnection,
        compiled: Compiled,
        args: list[Any],
        params: dict[str, Any],
        on_connection: Callable[[asyncpg.Connection], None] | None,
    ) -> list[asyncpg.Record]:
        driver: asyncpg.Connection = fairy.driver_connection
        if driver.is_closed():
            raise _Unsent
        if on_connection is not None:
            on_connection(driver)
        try:
            rows: list[asyncpg.Record] = await driver.fetch(compiled.sql, *args)
        except asyncpg.InternalClientError as error:
            # The driver refuses to start an operation while its protocol is not idle, as
            # when the server's termination message arrived but not yet its end of file:
            # raised before anything is sent.
            raise _Unsent from error
        except asyncpg.IntegrityConstraintViolationError as error:
            raise IntegrityError(compiled.sql, params, error) from error
        except _LOST as error:
            await greenlet_spawn(fairy.invalidate, error)
            raise DatabaseUnavailable(
                f"the connection to the database at {where(self.engine.url)} was lost "
                f"during a statement ({outage_cause(error)}); it may or may not "
                "have committed: check before retrying"
            ) from error
        except asyncpg.PostgresError as error:  # as SQLAlchemy would raise it
            raise DBAPIError(compiled.sql, params, error) from error
        return rows

    async def _checkout(self) -> PoolProxiedConnection:
        try:
            return await self.engine.raw_connection()
        except DBAPIError as error:
            unavailable = as_unavailable(error, self.engine.url)
            if unavailable is None:
                raise
            raise unavailable from None
