"""Array parameters: one statement shape for any batch size.

An ``IN (...)`` list or a multi-row ``VALUES`` renders differently for every batch
size, which defeats both SQLAlchemy's compiled cache and asyncpg's prepared
statements (every new size is parsed and planned again). ``= ANY(:array)`` and
``unnest(:a, :b, ...)`` keep the SQL text constant.

The hottest statements are also built once (``functools.cache``) with parameters
bound by name at execution, so neither the Core construct nor its cache key is
rebuilt per call.

``Unnest`` builds those batched statements from a row type: each field of a
``NamedTuple`` (or dataclass) is one array parameter, typed by the table column it fills, so a
table's columns are spelt once (the row type's fields) rather than in the
parameters, the ``unnest`` aliases, the insert's column list and its select.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    BindParameter,
    Column,
    DateTime,
    Insert,
    Integer,
    SmallInteger,
    Text,
    Update,
    Uuid,
    any_,
    bindparam,
    cast,
    column,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, HasPrefixes, TableValuedAlias
from sqlalchemy.types import TypeEngine

from legato.schema.tables import TableColumns
from legato.schema.types import PydanticJSONB, TextEnum

R = TypeVar("R")


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


class Unnest(Generic[R]):
    """A batch of ``row_type`` rows as ``unnest(:alias_f1, :alias_f2, ...) AS alias(f1,
    f2, ...)``: one array parameter per field (or per name in ``fields``), typed by the
    column of ``table`` it fills — the column of the same name, or the one ``columns``
    maps it to. A JSONB column travels as ``text[]`` (a JSON list inside an array
    parameter would be taken for a dimension) through the column type's own funnel,
    ``PydanticJSONB.dump_text``, and is cast back in SQL; an enum travels as text.

    The decider's rows are ``NamedTuple``s, so ``bind`` transposes a batch with
    ``zip(*rows)`` in C: no per-field Python loop over the rows on the hot path. A
    dataclass row (``runs.NewRun``, which callers ``replace``) is read through one
    ``attrgetter`` first.
    """

    def __init__(
        self,
        alias: str,
        row_type: type[R],
        table: TableColumns,
        *,
        fields: Sequence[str] | None = None,
        columns: Mapping[str, Column[Any]] | None = None,
    ) -> None:
        if dataclasses.is_dataclass(row_type):
            every = tuple(field.name for field in dataclasses.fields(row_type))
            self._as_tuple: Callable[[Any], tuple[Any, ...]] | None = attrgetter(*every)
        else:
            every = row_type._fields  # type: ignore[attr-defined]  # a NamedTuple
            self._as_tuple = None
        names = every if fields is None else tuple(fields)
        named = columns or {}
        targets = {name: named[name] if name in named else table.table.c[name] for name in names}
        self.table = table
        self.targets: Mapping[str, Column[Any]] = targets
        self._params = {name: f"{alias}_{name}" for name in names}
        # (parameter name, the field's index in the row, the JSON funnel or None)
        self._binds: tuple[tuple[str, int, Callable[[Any], str | None] | None], ...] = tuple(
            (self._params[name], every.index(name), _funnel(targets[name])) for name in names
        )
        self.alias: TableValuedAlias = rows_of(
            alias,
            **{
                name: bindparam(self._params[name], type_=ARRAY(_element(target)))
                for name, target in targets.items()
            },
        )

    def value(self, name: str) -> ColumnElement[Any]:
        """The field ``name`` of each row, as its column's SQL type (JSONB cast back)."""
        value: ColumnElement[Any] = self.alias.c[name]
        return cast(value, JSONB) if _funnel(self.targets[name]) else value

    def insert(self, **constants: ColumnElement[Any]) -> Insert:
        """``INSERT INTO table (fields' columns, constants' columns) SELECT ... FROM
        unnest``: every field into its column, plus per-statement values (``now()``, a
        bound parameter) for the columns named in ``constants``."""
        values = {self.targets[name].key: self.value(name) for name in self.targets}
        values.update(constants)
        return insert(self.table.table).from_select(list(values), select(*values.values()))

    def insert_one(self, **constants: ColumnElement[Any]) -> Insert:
        """``INSERT INTO table (...) VALUES (...)`` of ONE row, each field a scalar
        parameter of the same name as its array (bound by ``bind_one``): parameters the
        driver encodes itself, where an array parameter goes through SQLAlchemy's
        ``ARRAY`` conversion (legato/engine/transport/driver.py runs only the former)."""
        values: dict[str, Any] = {}
        for name, target in self.targets.items():
            param: ColumnElement[Any] = bindparam(self._params[name], type_=_element(target))
            values[target.key] = cast(param, JSONB) if _funnel(target) else param
        values.update(constants)
        return insert(self.table.table).values(values)

    def bind_one(self, row: R) -> dict[str, Any]:
        """The scalar parameters of ``insert_one`` for one row."""
        fields = row if self._as_tuple is None else self._as_tuple(row)
        return {
            param: fields[index] if funnel is None else funnel(fields[index])  # type: ignore[index]
            for param, index, funnel in self._binds
        }

    def update(
        self, *where: ColumnElement[bool], keys: Collection[str], **constants: Any
    ) -> Update:
        """``UPDATE table SET (every field but ``keys``, plus ``constants``) FROM unnest
        WHERE ...``: the caller matches rows to the keys in ``where`` (a key may match
        loosely, as an optional attempt does)."""
        values: dict[str, Any] = {
            self.targets[name].key: self.value(name) for name in self.targets if name not in keys
        }
        values.update(constants)
        return update(self.table.table).where(*where).values(values)

    def bind(self, rows: Sequence[R]) -> dict[str, Any]:
        """The array parameters of a batch of rows (empty arrays for none: a CTE of a
        fixed statement that writes nothing)."""
        if not rows:
            return {param: [] for param, _, _ in self._binds}
        tuples = rows if self._as_tuple is None else map(self._as_tuple, rows)
        fields = list(zip(*tuples, strict=True))
        return {
            param: list(fields[index]) if funnel is None else list(map(funnel, fields[index]))
            for param, index, funnel in self._binds
        }


def _funnel(target: Column[Any]) -> Callable[[Any], str | None] | None:
    return target.type.dump_text if isinstance(target.type, PydanticJSONB) else None


def _element(target: Column[Any]) -> TypeEngine[Any]:
    if isinstance(target.type, PydanticJSONB | TextEnum):
        return Text()
    return target.type


# Not ``shard``: an UPDATE executed with a parameter named like one of its table's
# columns also SETs that column from it (SQLAlchemy's crud), and as a part of
# ``decisions.write`` it would be an unbound copy.
SHARD_PARAM = "in_shard"


def shard_param() -> BindParameter[int]:
    """The statement's one shard key, the scalar ``smallint`` parameter ``in_shard``: every
    part of a statement (each CTE of a decision's write too) filters and inserts by it."""
    return bindparam(SHARD_PARAM, type_=SmallInteger())


# The keys a single-node installation's spanning statement covers (``Shards.distributed``
# False): the loop's held keys, a ``smallint[]``.
SHARDS_PARAM = "in_shards"
# The installation's key count, for the key computed in SQL from a run id.
SHARD_COUNT_PARAM = "shard_count"


def shards_param() -> BindParameter[Any]:
    """The keys a spanning statement covers, the array parameter ``in_shards``: the
    single-node layout's take, claim and flush serve every key a loop holds in one
    statement (``shard = ANY(:in_shards)``, each key's part through the per-key index)."""
    return bindparam(SHARDS_PARAM, type_=ARRAY(SmallInteger()))


def run_shard(run_id: ColumnElement[uuid.UUID]) -> ColumnElement[int]:
    """The key of the run ``run_id`` computed in SQL, as ``Shards.of_run`` does (its id's
    low 16 bits modulo the parameter ``shard_count``): how a spanning statement keys the
    rows it writes or joins to, row by row. An expression of another row's column (an
    ``unnest`` row, a CTE's), so it is an index condition of the join, not a filter."""
    low = (func.get_byte(func.uuid_send(run_id), 14).op("<<")(8)).op("|")(
        func.get_byte(func.uuid_send(run_id), 15)
    )
    return cast(low.op("%")(bindparam(SHARD_COUNT_PARAM, type_=Integer())), SmallInteger())


def from_floor() -> ColumnElement[Any]:
    """Where a take's or a claim's index range starts: the parameter ``since`` (the
    loop's floor, ``legato.engine.floors``), or minus infinity when it is None or not
    given. A stable expression, so a generic plan bounds the index scan with it."""
    since = bindparam("since", None, type_=DateTime(timezone=True))
    return func.coalesce(since, literal_column("'-infinity'::timestamptz"))


def after(part: CTE) -> ColumnElement[bool]:
    """A condition, always true, that makes a statement's part run only once the
    data-modifying CTE ``part`` has run to its end: ``(SELECT count(*) FROM part) >= 0``,
    an uncorrelated subquery PostgreSQL evaluates once, before the part that holds it
    scans its first row (an InitPlan), reading ``part`` to its end. So one statement's
    parts lock their rows in the order a transaction's statements would."""
    return select(func.count()).select_from(part).scalar_subquery() >= 0


def spanning_params(keys: Sequence[int], count: int) -> dict[str, Any]:
    """The parameters every spanning statement shares: the keys it covers, the count."""
    return {SHARDS_PARAM: list(keys), SHARD_COUNT_PARAM: count}


FAN_OUT = "/* fan-out across shard keys */"

_Prefixed = TypeVar("_Prefixed", bound=HasPrefixes)


def fan_out(statement: _Prefixed) -> _Prefixed:
    """``statement`` marked, in its SQL text, as one that reads or writes across shard
    keys: visible in ``pg_stat_statements`` and the server's logs, and what the test of
    single-key statements (tests/integration/test_shard_statements.py) leaves out. Only
    for statements off the hot paths (listings, stats, pruning, retention)."""
    return statement.prefix_with(FAN_OUT)
