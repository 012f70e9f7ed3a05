"""``legato.schema_compat``: which model changes refuse values the old model made or took."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from legato.schema_compat import accepted_schema, incompatibilities, produced_schema


def check(old: object, new: object) -> list[str]:
    """What ``old`` dumps, read by ``new``."""
    return incompatibilities(produced_schema(old), accepted_schema(new))


class User(BaseModel):
    user_id: str
    email: str


class UserWithOptionalName(BaseModel):
    user_id: str
    email: str
    name: str | None = None


class UserWithDefaultName(BaseModel):
    user_id: str
    email: str
    name: str = "anonymous"


class UserWithRequiredName(BaseModel):
    user_id: str
    email: str
    name: str


class UserWithoutEmail(BaseModel):
    user_id: str


class StrictUserWithoutEmail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str


class UserWithIntId(BaseModel):
    user_id: int
    email: str


class UserWithOptionalEmail(BaseModel):
    user_id: str
    email: str | None


class Address(BaseModel):
    street: str


class AddressWithZip(BaseModel):
    street: str
    zip: str


class Customer(BaseModel):
    address: Address
    tags: list[str]


class CustomerWithZip(BaseModel):
    address: AddressWithZip
    tags: list[str]


class CustomerWithIntTags(BaseModel):
    address: Address
    tags: list[int]


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class FewColours(enum.Enum):
    RED = "red"
    GREEN = "green"


class Paint(BaseModel):
    colour: Colour


class FewPaint(BaseModel):
    colour: FewColours


class Tree(BaseModel):
    value: int
    children: list[Tree] = []


class TreeWithLabel(BaseModel):
    value: int
    label: str
    children: list[TreeWithLabel] = []


# -- compatible changes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (User, User),
        (User, UserWithOptionalName),  # a new optional field
        (User, UserWithDefaultName),  # a new field with a default
        (User, UserWithoutEmail),  # a removed field: extra keys are ignored
        (User, UserWithOptionalEmail),  # a field made nullable
        (UserWithDefaultName, UserWithRequiredName),  # a default field is always dumped
        (Customer, Customer),
        (FewPaint, Paint),  # an enum that gained a member
        (Tree, Tree),  # recursive models
        (int, float),  # an int is a number
        (int, int | None),
        (Literal["a", "b"], str),
        (Literal["a"], Literal["a", "b"]),
        (list[int], list[float]),
        (dict[str, int], dict[str, float]),
        (tuple[int, str], tuple[int, str]),
        (datetime, datetime),
        (User, Any),
        (Any, Any),
        (UserWithOptionalName | None, UserWithOptionalName | None),
    ],
)
def test_compatible_changes(old: object, new: object) -> None:
    assert check(old, new) == []


# -- incompatible changes -------------------------------------------------------------


def test_a_new_required_field() -> None:
    assert check(User, UserWithRequiredName) == ["$.name: required, but not passed"]


def test_a_field_that_may_be_missing() -> None:
    assert check(UserWithOptionalName, UserWithRequiredName) == [
        "$.name: null may be passed, but string is expected"
    ]
    # A stored (validation) schema of the old model: the field was optional there.
    stored = accepted_schema(UserWithOptionalName)
    assert incompatibilities(stored, accepted_schema(UserWithRequiredName)) == [
        "$.name: required, but may be missing",
        "$.name: null may be passed, but string is expected",
    ]


def test_a_removed_field_when_extra_is_forbidden() -> None:
    assert check(User, StrictUserWithoutEmail) == ["$.email: passed, but no longer accepted"]


def test_a_changed_type() -> None:
    assert check(User, UserWithIntId) == [
        "$.user_id: string may be passed, but integer is expected"
    ]
    assert check(float, int) == ["$: number may be passed, but integer is expected"]


def test_a_field_made_non_nullable() -> None:
    assert check(UserWithOptionalEmail, User) == [
        "$.email: null may be passed, but string is expected"
    ]
    assert check(int | None, int) == ["$: null may be passed, but integer is expected"]


def test_nested_models_and_arrays() -> None:
    assert check(Customer, CustomerWithZip) == ["$.address.zip: required, but not passed"]
    assert check(Customer, CustomerWithIntTags) == [
        "$.tags[]: string may be passed, but integer is expected"
    ]


def test_recursive_models() -> None:
    assert check(Tree, TreeWithLabel) == ["$.label: required, but not passed"]


def test_an_enum_that_lost_a_member() -> None:
    assert check(Paint, FewPaint) == [
        "$.colour: 'blue' may be passed, but only 'red', 'green' is accepted"
    ]
    assert check(str, Literal["a", "b"]) == [
        "$: any string may be passed, but only 'a', 'b' are accepted"
    ]


def test_a_format() -> None:
    assert check(str, datetime) == ["$: a string may be passed, but format 'date-time' is expected"]


def test_a_new_constraint() -> None:
    class Loose(BaseModel):
        code: str

    class Tight(BaseModel):
        code: str = Field(max_length=4)

    class Tighter(BaseModel):
        code: str = Field(max_length=2)

    assert check(Loose, Tight) == ["$.code: maxLength 4 is required, which is not guaranteed"]
    assert check(Tight, Tight) == []
    assert check(Tighter, Tight) == []
    assert check(Tight, Tighter) == ["$.code: maxLength 2 is required, which is not guaranteed"]


def test_arrays_and_tuples() -> None:
    assert check(list[int], list[str]) == ["$[]: integer may be passed, but string is expected"]
    assert check(tuple[int, int], tuple[int, str]) == [
        "$[1]: integer may be passed, but string is expected"
    ]
    assert check(list[int], int) == ["$: array may be passed, but integer is expected"]


def test_dicts() -> None:
    assert check(dict[str, int], dict[str, str]) == [
        "$.*: integer may be passed, but string is expected"
    ]
    assert check(dict[str, int], User) == [
        "$.user_id: required, but not passed",
        "$.email: required, but not passed",
    ]


def test_anything_into_a_typed_model() -> None:
    assert check(Any, int) == ["$: any JSON value may be passed, but integer is expected"]


def test_unions() -> None:
    assert check(int | str, int) == ["$: string may be passed, but integer is expected"]
    assert check(int | str, str | int) == []
    assert check(UserWithOptionalName, UserWithRequiredName | None) == [
        "$.name: null may be passed, but string is expected"
    ]


def test_refs_into_defs_are_resolved_on_each_side() -> None:
    produced = {
        "$defs": {
            "A": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
        },
        "$ref": "#/$defs/A",
    }
    accepted = {
        "$defs": {
            "B": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
        },
        "allOf": [{"$ref": "#/$defs/B"}],
    }
    assert incompatibilities(produced, accepted) == [
        "$.x: integer may be passed, but string is expected"
    ]
    assert incompatibilities({"$ref": "#/$defs/missing"}, {"type": "string"}) == [
        "$: any JSON value may be passed, but string is expected"
    ]


def test_nullable_as_a_type_list() -> None:
    assert incompatibilities({"type": ["string", "null"]}, {"type": "string"}) == [
        "$: null may be passed, but string is expected"
    ]
    assert incompatibilities({"type": "string"}, {"type": ["string", "null"]}) == []
    assert incompatibilities({"const": None}, {"type": "null"}) == []
