"""Pure column-type helpers: UUIDv7 generation and bounds, NUL stripping, the JSONB funnel."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from pydantic import BaseModel, JsonValue, TypeAdapter
from sqlalchemy.ext.asyncio import create_async_engine

from legato.schema import is_uuid7, strip_nul, uuid7, uuid7_bound, uuid7_time_ms
from legato.schema.types import JSON_VALUE, PydanticJSONB, to_jsonb


def test_uuid7_is_version_7_with_rfc_variant() -> None:
    value = uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert is_uuid7(value)
    assert not is_uuid7(uuid.uuid4())


def test_uuid7_is_monotonic_within_a_process() -> None:
    values = [uuid7() for _ in range(10_000)]
    assert values == sorted(values)
    assert len(set(values)) == len(values)
    # byte order is the order PostgreSQL's uuid type sorts by
    assert [v.bytes for v in values] == sorted(v.bytes for v in values)


def test_uuid7_time_decodes() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    assert before <= uuid7_time_ms(value) <= after + 1
    at = int(datetime(2024, 1, 15, 12, tzinfo=UTC).timestamp() * 1000)
    assert uuid7_time_ms(uuid7(at_ms=at)) == at


def test_uuid7_bound_orders_a_month() -> None:
    start = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)
    end = int(datetime(2024, 2, 1, tzinfo=UTC).timestamp() * 1000)
    lower, upper = uuid7_bound(start), uuid7_bound(end)
    assert uuid7_time_ms(lower) == start
    assert lower <= uuid7(at_ms=start) < upper
    assert lower <= uuid7(at_ms=end - 1) < upper
    assert not lower <= uuid7(at_ms=end) < upper
    assert uuid7_bound(start) < uuid7(at_ms=start)  # the smallest id of its millisecond


def test_strip_nul_on_nested_values_and_keys() -> None:
    value: JsonValue = {
        "a\x00b": ["x\x00", {"k\x00": "v\x00v", "n": 1, "f": 1.5, "t": True, "z": None}],
        "plain": "untouched",
    }
    assert strip_nul(value) == {
        "ab": ["x", {"k": "vv", "n": 1, "f": 1.5, "t": True, "z": None}],
        "plain": "untouched",
    }
    assert strip_nul("\x00") == ""
    assert strip_nul(7) == 7


class Payload(BaseModel):
    name: str
    tags: list[str]


def test_funnel_serialises_through_pydantic_and_strips_nul() -> None:
    payload = Payload(name="a\x00b", tags=["\x00x"])
    assert to_jsonb(TypeAdapter(Payload), payload) == {"name": "ab", "tags": ["x"]}
    column_type: PydanticJSONB[Payload] = PydanticJSONB(Payload)
    dialect = create_async_engine("postgresql+asyncpg://user@localhost/db").dialect
    assert column_type.process_bind_param(payload, dialect) == {"name": "ab", "tags": ["x"]}
    assert column_type.process_result_value({"name": "ab", "tags": []}, dialect) == Payload(
        name="ab", tags=[]
    )
    assert JSON_VALUE.process_bind_param({"k\x00": "v\x00"}, dialect) == {"k": "v"}
    assert JSON_VALUE.process_bind_param(None, dialect) is None
