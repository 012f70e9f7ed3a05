"""How a table is declared: the shared ``MetaData`` (in the placeholder schema, with
the naming convention), the typed column helpers and ``TableColumns``, the namespace
class each table's columns are declared on (see ``legato.schema.tables``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    MetaData,
    SmallInteger,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.sql.schema import SchemaItem

from legato.schema.types import JSON_VALUE, PydanticJSONB, TextEnum
from legato.schema.values import TaskError

SCHEMA_PLACEHOLDER = "legato"

metadata = MetaData(
    schema=SCHEMA_PLACEHOLDER,
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)

ERROR_JSON: PydanticJSONB[TaskError] = PydanticJSONB(TaskError)


def _now() -> Any:
    return func.now()


def uuid_col(**kw: Any) -> Column[uuid.UUID]:
    return Column(Uuid(as_uuid=True), nullable=False, **kw)


def text_col(*, nullable: bool = False, **kw: Any) -> Column[str]:
    return Column(Text, nullable=nullable, **kw)


def int_col(*, default: int | None = None, **kw: Any) -> Column[int]:
    server_default = text(str(default)) if default is not None else None
    return Column(Integer, nullable=False, server_default=server_default, **kw)


def time_col(*, nullable: bool = True, now_default: bool = False) -> Column[datetime]:
    return Column(
        DateTime(timezone=True),
        nullable=nullable,
        server_default=_now() if now_default else None,
    )


def shard_col() -> Column[int]:
    """The run's shard key (``legato.schema.shards``): first in every run-scoped key."""
    return Column(SmallInteger, nullable=False)


def json_col(*, nullable: bool = True) -> Column[JsonValue]:
    return Column(JSON_VALUE, nullable=nullable)


def error_col() -> Column[TaskError]:
    return Column(ERROR_JSON, nullable=True)


def enum_col(enum_type: type[Any]) -> Column[Any]:
    return Column(TextEnum(enum_type), nullable=False)


def enum_check(column: str, enum_type: type[StrEnum]) -> CheckConstraint:
    """The CHECK constraint that keeps a TEXT state column inside its enum."""
    values = ", ".join(f"'{member.value}'" for member in enum_type)
    return CheckConstraint(f"{column} IN ({values})", name=f"{column}_valid")


class TableColumns:
    """A table's typed column namespace: each class attribute is a ``Column`` of the table.

    ``Runs.status`` *is* ``Runs.table.c.status``, typed ``Column[RunStatus]``, so a
    query built from ``select(Runs.status)`` is typed and a misspelt column is a mypy
    ``attr-defined`` error (``Table.c`` would accept any name).
    """

    table: Table

    def __init__(self, name: str, *args: SchemaItem, **kw: Any) -> None:
        columns: list[Column[Any]] = []
        for attr, value in vars(type(self)).items():
            if isinstance(value, Column):
                value.name = value.key = attr
                columns.append(value)
        self.table = Table(name, metadata, *columns, *args, **kw)
        for column in self.table.columns:
            setattr(self, column.key, column)
