"""Column types: the one JSONB funnel, enums stored as TEXT, and UUIDv7 ids."""

from __future__ import annotations

import json
import os
import time
import uuid
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import JsonValue, TypeAdapter
from sqlalchemy import Dialect, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from legato.errors import InvalidArgument

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)


def strip_nul(value: JsonValue) -> JsonValue:
    """Remove ``\\u0000`` from every string (keys included): PostgreSQL's JSONB cannot store it.

    A NUL inside text is a truncation marker or a fuzzer's leftover, never content;
    refusing to record a finished task over one unprintable byte would be the worse bug.
    """
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, list):
        return [strip_nul(item) for item in value]
    if isinstance(value, dict):
        return {key.replace("\x00", ""): strip_nul(item) for key, item in value.items()}
    return value


def to_jsonb(adapter: TypeAdapter[T], value: T) -> JsonValue:
    """The JSONB funnel: serialise through pydantic in JSON mode, then strip NULs."""
    dumped: JsonValue = adapter.dump_python(value, mode="json")
    return strip_nul(dumped)


class PydanticJSONB(TypeDecorator[T], Generic[T]):
    """A JSONB column read and written as ``T`` through a pydantic ``TypeAdapter``.

    Every JSONB write in Legato goes through ``to_jsonb`` here.
    """

    impl = JSONB
    cache_ok = True

    def __init__(self, python_type: type[T] | Any) -> None:
        super().__init__(none_as_null=True)
        self.python_type_ = python_type
        self._adapter: TypeAdapter[T] = TypeAdapter(python_type)

    def process_bind_param(self, value: T | None, dialect: Dialect) -> JsonValue:
        if value is None:
            return None
        return to_jsonb(self._adapter, value)

    def process_result_value(self, value: Any, dialect: Dialect) -> T | None:
        if value is None:
            return None
        return self._adapter.validate_python(value)

    def coerce_compared_value(self, op: Any, value: Any) -> Any:
        return self.impl_instance

    def dump_text(self, value: T | None) -> str | None:
        """The same funnel for a value bound as text (inside an array parameter, where
        a JSON list would be taken for an array dimension); cast to jsonb in SQL."""
        if value is None:
            return None
        return json.dumps(to_jsonb(self._adapter, value), separators=(",", ":"))


class TextEnum(TypeDecorator[E], Generic[E]):
    """A ``StrEnum`` stored as TEXT; the table carries the CHECK constraint (``enum_check``)."""

    impl = Text
    cache_ok = True

    def __init__(self, enum_type: type[E]) -> None:
        super().__init__()
        self.enum_type = enum_type

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return self.enum_type(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        if value is None:
            return None
        return self.enum_type(value)


JSON_VALUE: PydanticJSONB[JsonValue] = PydanticJSONB(JsonValue)


# -- UUIDv7 ------------------------------------------------------------------------------------

_last_ms = 0
_last_seq = 0


# A run id's time is read back as a datetime, which ends with the year 9999 (the 48
# bits of a UUIDv7's timestamp go on to the year 10889).
MAX_UUID7_MS = 253_402_300_799_999


def uuid7(at_ms: int | None = None) -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit sequence, then random bits.

    Ids generated in one process are strictly increasing (the sequence counts within a
    millisecond), so they sort by creation like the server's ``uuidv7()``.
    """
    global _last_ms, _last_seq
    if at_ms is not None and (
        not isinstance(at_ms, int) or isinstance(at_ms, bool) or not 0 <= at_ms <= MAX_UUID7_MS
    ):
        raise InvalidArgument(
            f"uuid7(at_ms={at_ms!r}): at_ms must be an int of milliseconds since the Unix "
            f"epoch from 0 to {MAX_UUID7_MS} (the end of the year 9999), e.g. "
            "int(time.time() * 1000); or omit it for now"
        )
    ms = time.time_ns() // 1_000_000 if at_ms is None else at_ms
    if at_ms is None:
        if ms <= _last_ms:
            ms = _last_ms
            _last_seq += 1
            if _last_seq > 0xFFF:
                ms += 1
                _last_seq = 0
        else:
            _last_seq = int.from_bytes(os.urandom(2), "big") & 0x3FF
        _last_ms = ms
        seq = _last_seq
    else:
        seq = int.from_bytes(os.urandom(2), "big") & 0xFFF
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand
    return uuid.UUID(int=value)


def uuid7_time_ms(value: uuid.UUID) -> int:
    """The Unix millisecond timestamp a UUIDv7 encodes."""
    return value.int >> 80


def is_uuid7(value: uuid.UUID) -> bool:
    return value.version == 7 and value.variant == uuid.RFC_4122


def uuid7_bound(at_ms: int) -> uuid.UUID:
    """The smallest UUIDv7 at ``at_ms``: the partition boundary for runs created from then on."""
    return uuid.UUID(int=(at_ms & ((1 << 48) - 1)) << 80)
