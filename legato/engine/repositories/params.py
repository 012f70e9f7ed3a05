"""Array parameters: one statement shape for any batch size.

An ``IN (...)`` list or a multi-row ``VALUES`` renders differently for every batch
size, which defeats both SQLAlchemy's compiled cache and asyncpg's prepared
statements (every new size is parsed and planned again). ``= ANY(:array)`` and
``unnest(:a, :b, ...)`` keep the SQL text constant.

The hottest statements are also built once (``functools.cache``) with parameters
bound by name at execution, so neither the Core construct nor its cache key is
rebuilt per call.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    BindParameter,
    Boolean,
    DateTime,
    Integer,
    Text,
    Uuid,
    any_,
    bindparam,
    column,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeEngine


def uuid_array(name: str, values: Iterable[uuid.UUID | None] | None = None) -> BindParameter[Any]:
    """A ``uuid[]`` parameter (bound now, or later by name when ``values`` is None)."""
    if values is None:
        return bindparam(name, type_=ARRAY(Uuid()))
    return bindparam(name, list(values), type_=ARRAY(Uuid()))


def text_array(name: str, values: Iterable[str | None] | None = None) -> BindParameter[Any]:
    """A ``text[]`` parameter."""
    if values is None:
        return bindparam(name, type_=ARRAY(Text()))
    return bindparam(name, list(values), type_=ARRAY(Text()))


def bool_array(name: str) -> BindParameter[Any]:
    """A ``boolean[]`` parameter, bound by name at execution."""
    return bindparam(name, type_=ARRAY(Boolean()))


def int_array(name: str) -> BindParameter[Any]:
    """An ``integer[]`` parameter, bound by name at execution."""
    return bindparam(name, type_=ARRAY(Integer()))


def time_array(name: str) -> BindParameter[Any]:
    """A ``timestamptz[]`` parameter, bound by name at execution."""
    return bindparam(name, type_=ARRAY(DateTime(timezone=True)))


def rows_of(alias: str, **arrays: BindParameter[Any]) -> TableValuedAlias:
    """``unnest(:a, :b, ...) AS alias(a, b, ...)``: parallel array parameters as rows,
    one column per array (named by its keyword, typed by the array's element type)."""
    return (
        func.unnest(*arrays.values())
        .table_valued(*(column(name, _element_type(array)) for name, array in arrays.items()))
        .render_derived(name=alias)
    )


def _element_type(array: BindParameter[Any]) -> TypeEngine[Any]:
    if not isinstance(array.type, ARRAY):
        raise TypeError(f"{array.key} is not an array parameter")
    return array.type.item_type


def in_array(column: ColumnElement[Any], array: BindParameter[Any]) -> ColumnElement[bool]:
    """``column = ANY(:array)``."""
    return column == any_(array)
