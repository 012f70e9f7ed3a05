"""Whether every JSON value one schema describes is accepted by another; pure.

:func:`incompatibilities` compares a *produced* schema (what a value may look like: the
serialization schema of the type that makes it, or a stored schema of an older model)
with an *accepted* schema (the validation schema of the model that will parse it) and
returns why some produced value could be refused, one line each; ``[]`` means every
produced value is accepted. It covers the subset pydantic emits: ``type`` (a name or a
list), object ``properties``/``required``/``additionalProperties``, ``anyOf``/``oneOf``
(``Optional`` is ``anyOf [..., {"type": "null"}]``), a one-element ``allOf``,
``$ref`` into ``$defs`` (recursive models included), arrays (``items``, ``prefixItems``),
``enum``/``const``, ``format``, and the length, range and pattern constraints. It is
conservative: where it cannot prove a value is accepted it says so (an ``int`` field
read by a ``str`` model is refused, although pydantic's lax mode would accept ``"1"`` for
an ``int`` the other way round); a schema keyword it does not know is ignored.

:func:`produced_schema` and :func:`accepted_schema` give the two schemas of a Python
type as pydantic sees it.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode
from pydantic_core import core_schema

Schema = Mapping[str, Any]

ROOT = "$"
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# Constraints a value may break, and whether a bigger bound is the stricter one.
_LOWER_BOUNDS = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
_UPPER_BOUNDS = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")


class _AlwaysPresent(GenerateJsonSchema):
    """Serialization schemas where a field with a default is required: a dumped model
    always carries it (the worker dumps every field), so a reader may rely on it."""

    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,
    ) -> bool:
        if self.mode == "serialization" and field["type"] != "typed-dict-field":
            return field.get("serialization_exclude_if") is None
        return super().field_is_required(field, total)


def _schema_of(tp: object, mode: JsonSchemaMode) -> dict[str, Any]:
    adapter = TypeAdapter(typing.cast("type[object]", tp))
    return adapter.json_schema(mode=mode, schema_generator=_AlwaysPresent)


def produced_schema(tp: object) -> dict[str, Any]:
    """The JSON schema of what a value of ``tp`` dumps to (``mode="json"``)."""
    return _schema_of(tp, "serialization")


def accepted_schema(tp: object) -> dict[str, Any]:
    """The JSON schema of what validating into ``tp`` accepts."""
    return _schema_of(tp, "validation")


def incompatibilities(produced: Schema, accepted: Schema) -> list[str]:
    """Why a value ``produced`` describes may be refused by ``accepted``; ``[]`` if never.

    Each line names where (``$`` the value, ``$.field``, ``$.items[]``) and what: a
    required field that may be missing, a field the accepting model forbids, a type,
    enum value or format it does not take, or a constraint it adds.
    """
    return _Compare(produced, accepted).compare(produced, accepted, ROOT)


class _Compare:
    def __init__(self, produced_root: Schema, accepted_root: Schema) -> None:
        self.roots = (produced_root, accepted_root)
        self.seen: set[tuple[str, str]] = set()

    def resolve(self, schema: Schema, side: int) -> Schema:
        hops = 0
        while "$ref" in schema and hops < 50:
            schema = _lookup(self.roots[side], schema["$ref"], schema)
            hops += 1
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return {**self.resolve(all_of[0], side), **rest}
        return schema

    def compare(self, produced: Schema, accepted: Schema, where: str) -> list[str]:
        refs = (produced.get("$ref"), accepted.get("$ref"))
        if isinstance(refs[0], str) and isinstance(refs[1], str):
            if refs in self.seen:  # a recursive model met again: assume it holds
                return []
            self.seen.add((refs[0], refs[1]))
        produced = self.resolve(produced, 0)
        accepted = self.resolve(accepted, 1)
        if _accepts_anything(accepted):
            return []
        produced_options = _options(produced)
        if produced_options is not None:
            found: list[str] = []
            for option in produced_options:
                found.extend(r for r in self.compare(option, accepted, where) if r not in found)
            return found
        accepted_options = _options(accepted)
        if accepted_options is not None:
            return self.any_of(produced, accepted_options, where)
        all_of = accepted.get("allOf")
        if isinstance(all_of, list):
            found = []
            for part in all_of:
                found.extend(r for r in self.compare(produced, part, where) if r not in found)
            return found
        return self.single(produced, accepted, where)

    def any_of(self, produced: Schema, options: Sequence[Schema], where: str) -> list[str]:
        """``produced`` fits one of ``options``, or the reasons of the closest one."""
        best: list[str] | None = None
        for option in options:
            reasons = self.compare(produced, option, where)
            if not reasons:
                return []
            same_type = bool(_types(produced) & _types(self.resolve(option, 1)))
            if best is None or same_type:
                best = reasons
                if same_type:
                    break
        return best or []

    def single(self, produced: Schema, accepted: Schema, where: str) -> list[str]:
        values = _values(produced)
        if values is not None:
            return [r for v in values for r in _value_refused(v, accepted, where)]
        allowed = _values(accepted)
        produced_types = _types(produced)
        if allowed is not None:
            return [
                f"{where}: any {_shown_types(produced_types)} may be passed, but only "
                f"{_shown_values(allowed)} {'is' if len(allowed) == 1 else 'are'} accepted"
            ]
        accepted_types = _types(accepted)
        if not produced_types:
            expected = _shown_types(accepted_types)
            return [f"{where}: any JSON value may be passed, but {expected} is expected"]
        refused = {t for t in produced_types if not _type_accepted(t, accepted_types)}
        if refused:
            return [
                f"{where}: {_shown_types(refused)} may be passed, but "
                f"{_shown_types(accepted_types)} is expected"
            ]
        reasons = self.constraints(produced, accepted, where)
        if "object" in produced_types:
            reasons += self.object(produced, accepted, where)
        if "array" in produced_types:
            reasons += self.array(produced, accepted, where)
        return reasons

    def constraints(self, produced: Schema, accepted: Schema, where: str) -> list[str]:
        reasons: list[str] = []
        fmt = accepted.get("format")
        if isinstance(fmt, str) and produced.get("format") != fmt and "string" in _types(accepted):
            shown = produced.get("format")
            reasons.append(
                f"{where}: a string {'' if shown is None else f'of format {shown!r} '}may be "
                f"passed, but format {fmt!r} is expected"
            )
        pattern = accepted.get("pattern")
        if isinstance(pattern, str) and produced.get("pattern") != pattern:
            reasons.append(f"{where}: must match pattern {pattern!r}, which is not guaranteed")
        for key in (*_LOWER_BOUNDS, *_UPPER_BOUNDS):
            bound = accepted.get(key)
            if not isinstance(bound, int | float) or isinstance(bound, bool):
                continue
            given = produced.get(key)
            stricter = key in _LOWER_BOUNDS
            if isinstance(given, int | float) and (given >= bound if stricter else given <= bound):
                continue
            reasons.append(f"{where}: {key} {bound} is required, which is not guaranteed")
        return reasons

    def object(self, produced: Schema, accepted: Schema, where: str) -> list[str]:
        reasons: list[str] = []
        given: Mapping[str, Schema] = produced.get("properties") or {}
        wanted: Mapping[str, Schema] = accepted.get("properties") or {}
        given_required = set(produced.get("required") or ())
        extra = accepted.get("additionalProperties", True)
        for name in accepted.get("required") or ():
            if name in given_required:
                continue
            if name in given:
                reasons.append(f"{_at(where, name)}: required, but may be missing")
            else:
                reasons.append(f"{_at(where, name)}: required, but not passed")
        for name, schema in given.items():
            if name in wanted:
                reasons += self.compare(schema, wanted[name], _at(where, name))
            elif extra is False:
                reasons.append(f"{_at(where, name)}: passed, but no longer accepted")
            elif isinstance(extra, Mapping):
                reasons += self.compare(schema, extra, _at(where, name))
        more = produced.get("additionalProperties", not given and "properties" not in produced)
        if more is not False:
            keys = f"{where}: other keys"
            if extra is False:
                reasons.append(f"{keys} may be passed, but none are accepted")
            elif isinstance(extra, Mapping):
                reasons += self.compare(
                    more if isinstance(more, Mapping) else {}, extra, f"{where}.*"
                )
        return reasons

    def array(self, produced: Schema, accepted: Schema, where: str) -> list[str]:
        reasons: list[str] = []
        given_prefix = produced.get("prefixItems") or []
        wanted_prefix = accepted.get("prefixItems") or []
        given_items = produced.get("items", {} if not given_prefix else False)
        wanted_items = accepted.get("items", {} if not wanted_prefix else False)
        length = max(len(given_prefix), len(wanted_prefix))
        for i in range(length):
            item_where = f"{where}[{i}]"
            mine = given_prefix[i] if i < len(given_prefix) else given_items
            theirs = wanted_prefix[i] if i < len(wanted_prefix) else wanted_items
            if mine is False:
                if i < len(wanted_prefix) and "minItems" in accepted:
                    reasons.append(f"{item_where}: required, but not passed")
                continue
            if theirs is False:
                reasons.append(f"{item_where}: passed, but the array accepts no more items")
                continue
            reasons += self.compare(mine, theirs, item_where)
        if given_items is not False:
            if wanted_items is False:
                reasons.append(f"{where}[]: more items may be passed than are accepted")
            else:
                reasons += self.compare(given_items, wanted_items, f"{where}[]")
        return reasons


def _lookup(root: Schema, ref: str, schema: Schema) -> Schema:
    if not ref.startswith("#/"):
        return {}
    target: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(target, Mapping) or part not in target:
            return {}
        target = target[part]
    if not isinstance(target, Mapping):
        return {}
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    return {**target, **rest}


_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$defs",
        "definitions",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "$comment",
    }
)


def _accepts_anything(schema: Schema) -> bool:
    return not (set(schema) - _ANNOTATIONS)


def _options(schema: Schema) -> list[Schema] | None:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
            return [{**rest, **o} if isinstance(o, Mapping) else {} for o in options]
    return None


def _types(schema: Schema) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    values = _values(schema)
    if values is not None:
        return {_json_type(v) for v in values}
    if "properties" in schema or "additionalProperties" in schema:
        return {"object"}
    if "items" in schema or "prefixItems" in schema:
        return {"array"}
    return set()


def _values(schema: Schema) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_accepted(given: str, accepted: set[str]) -> bool:
    return given in accepted or (given == "integer" and "number" in accepted)


def _value_refused(value: Any, accepted: Schema, where: str) -> list[str]:
    allowed = _values(accepted)
    if allowed is not None:
        if any(_same_value(value, a) for a in allowed):
            return []
        return [f"{where}: {value!r} may be passed, but only {_shown_values(allowed)} is accepted"]
    types = _types(accepted)
    if types and not _type_accepted(_json_type(value), types):
        return [f"{where}: {value!r} may be passed, but {_shown_types(types)} is expected"]
    return []


def _same_value(a: Any, b: Any) -> bool:
    numbers = ("integer", "number")
    if _json_type(a) in numbers and _json_type(b) in numbers:
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _at(where: str, name: str) -> str:
    return f"{where}.{name}"


def _shown_types(types: set[str]) -> str:
    ordered = [t for t in _TYPES if t in types] + sorted(types - set(_TYPES))
    return " or ".join(ordered) if ordered else "any JSON value"


def _shown_values(values: Sequence[Any]) -> str:
    shown = ", ".join(repr(v) for v in values[:8])
    return f"{shown}, …" if len(values) > 8 else shown
