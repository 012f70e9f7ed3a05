"""Core statements compiled once to the asyncpg driver's SQL text, and executed so.

Why: SQLAlchemy's ``AsyncConnection.execute`` pays, at every execution, the statement's
cache lookup, the schema translation of its text and each parameter's conversion; for
the decision's write (77-98 parameters, nearly all arrays) that was 0.2-0.6 ms of the
decider's time per decision, about the statement's own time on the server. The statement stays
a Core construct in its repository (the schema is spelt once, in ``legato.schema``);
what is cached here is its text in one schema and its parameters' order. Only statements
whose parameters need no SQLAlchemy conversion compile (scalars and arrays the driver
encodes itself; JSON as text cast in SQL); ``compile_for_driver`` refuses the others.

``execute_in`` runs such a statement in the caller's transaction through
``exec_driver_sql``, so SQLAlchemy's lazy ``BEGIN``, cursor events, error translation
and invalidation of a lost connection all stay; ``legato.engine.transport.driver``
runs them as autocommit statements straight on the pooled connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from sqlalchemy import ARRAY, Boolean
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.type_api import TypeEngine


@dataclass(frozen=True)
class Compiled:
    """A statement as the driver's SQL text, compiled once."""

    sql: str
    # Each ``$n`` in order: the parameter's name, and its value when the statement
    # fixes it (a ``literal``), else _GIVEN.
    binds: tuple[tuple[str, Any], ...]

    def args(self, params: dict[str, Any]) -> list[Any]:
        return [params[name] if value is _GIVEN else value for name, value in self.binds]


_GIVEN = object()


class Autocommits(Protocol):
    """What runs a statement as one autocommit statement on a pooled driver connection
    (``legato.engine.transport.driver.DriverStatements``, given by the caller: the
    repositories stand below the transport), ``on_connection`` getting that connection
    before the statement is sent."""

    async def execute(
        self,
        statement: Executable,
        params: dict[str, Any],
        on_connection: Callable[[Any], None] | None = None,
    ) -> Sequence[Sequence[Any]]: ...


async def execute_in(
    conn: AsyncConnection, statement: Executable, params: dict[str, Any]
) -> Sequence[Sequence[Any]]:
    """Execute ``statement`` with ``params`` inside ``conn``'s transaction as SQL text
    compiled once (``exec_driver_sql``); its rows as the driver decodes them, with no
    SQLAlchemy result processing (so only for statements whose result columns need
    none: ids, plain text). Hot statements of the decider loop and the report flushes;
    the rest keep ``AsyncConnection.execute``."""
    sync = conn.sync_connection
    options = sync.get_execution_options() if sync is not None else {}
    translate = options.get("schema_translate_map") or {}
    compiled = _compiled_in(conn.dialect, tuple(sorted(translate.items(), key=str)), statement)
    result = await conn.exec_driver_sql(compiled.sql, tuple(compiled.args(params)))
    return result.all() if result.returns_rows else []


@lru_cache(maxsize=256)
def _compiled_in(
    dialect: Dialect, translate: tuple[tuple[str | None, str | None], ...], statement: Executable
) -> Compiled:
    return compile_for_driver(dialect, dict(translate), statement)


def compile_for_driver(
    dialect: Dialect, translate: dict[str | None, str | None], statement: Executable
) -> Compiled:
    """``statement`` as asyncpg SQL text in the schema ``translate`` maps to, with its
    parameters' order; refuses a statement with a parameter SQLAlchemy would have to
    convert (an array is given as a list, which the driver encodes itself)."""
    compiler = statement.compile(dialect=dialect, schema_translate_map=translate)  # type: ignore[attr-defined]
    assert isinstance(compiler, SQLCompiler) and compiler.positiontup is not None
    # What SQLAlchemy does to the text at each execution with a schema_translate_map.
    sql = compiler.preparer._render_schema_translates(compiler.string, translate)
    binds = []
    for name in compiler.positiontup:
        bind = compiler.binds[name]
        kind = bind.type.dialect_impl(dialect)
        process = kind.bind_processor(dialect)
        # A statement's own values (a ``literal``, a compared enum) are anonymous, so
        # unique, parameters: converted here, once.
        if bind.unique:
            binds.append((name, bind.value if process is None else process(bind.value)))
        elif process is None or _driver_encodes(bind.type, dialect):
            binds.append((name, _GIVEN))
        else:
            raise TypeError(f"parameter {name!r} ({kind!r}) needs SQLAlchemy's conversion")
    return Compiled(sql, tuple(binds))


def _driver_encodes(kind: TypeEngine[Any], dialect: Dialect) -> bool:
    """Whether SQLAlchemy's conversion of a value of ``kind`` is one the driver does as
    well: a boolean's (SQLAlchemy only checks it is one), an array's of elements that
    need none (SQLAlchemy only makes it a list)."""
    if isinstance(kind, Boolean):
        return True
    if isinstance(kind, ARRAY):
        element = kind.item_type
        return isinstance(element, Boolean) or (
            element.dialect_impl(dialect).bind_processor(dialect) is None
        )
    return False
