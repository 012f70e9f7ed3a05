"""The CLI's argument checks, as plain functions: JSON depth and constants, number
ranges, quoting of bad values, one-line errors and database URL ports."""

from __future__ import annotations

import argparse

import pytest

from legato.cli import (
    MAX_ERROR_CHARS,
    bad_argument,
    error_line,
    nonempty,
    number_in,
    shown,
)
from legato.cli.runs import parse_json
from legato.db.urls import resolve_url
from legato.errors import ConfigurationError, InvalidInput
from legato.limits import MAX_JSON_DEPTH, json_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[["', 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["\\"[", {}]', 2),
        ('["\\\\", [["]"]]]', 3),
        ("[[], [], [[]]]", 3),
    ],
)
def test_json_depth_counts_nesting_outside_strings(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_json_depth_stops_counting_past_the_limit() -> None:
    deep = "[" * 1_000_000 + "]" * 1_000_000
    assert json_depth(deep, limit=64) == 65


def test_parse_json_accepts_the_limit_and_refuses_one_more() -> None:
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(at_limit, "--input") is not None
    with pytest.raises(InvalidInput, match=f"more than {MAX_JSON_DEPTH} levels deep"):
        parse_json("[" + at_limit + "]", "--input")


def test_parse_json_refuses_a_depth_that_would_blow_the_stack() -> None:
    with pytest.raises(InvalidInput, match="--payload nests"):
        parse_json("{" + '"a":[' * 100_000, "--payload")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("NaN", "NaN"),
        ("[Infinity]", "Infinity"),
        ('{"x": -Infinity}', "-Infinity"),
        ("1e400", "1e400"),
        ("-1E+999", "-1E+999"),
        ("9" * 5000, "5,000-digit number"),
    ],
)
def test_parse_json_refuses_what_jsonb_cannot_hold(text: str, named: str) -> None:
    with pytest.raises(InvalidInput, match="not valid JSON") as raised:
        parse_json(text, "--input")
    assert named in str(raised.value)
    assert "set_int_max_str_digits" not in str(raised.value)


def test_parse_json_values() -> None:
    assert parse_json(None, "--input") is None
    assert parse_json('{"a": [1, 2.5, "NaN", null]}', "--input") == {"a": [1, 2.5, "NaN", None]}


def test_a_long_bad_value_is_quoted_short() -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_json("x" * 100_000, "--input")
    assert len(str(raised.value)) < 300
    assert "[100,000 characters]" in str(raised.value)
    assert shown("abc") == "'abc'"


def test_error_line_is_one_bounded_line() -> None:
    folded = error_line(
        "1 validation error\n  email\n    Field required\nFor further information x"
    )
    assert folded == "legato: error: 1 validation error; email; Field required"
    long = error_line("bad value " + "x" * 10_000 + ": do this instead", " (hint)")
    assert long.startswith("legato: error: bad value xxx")
    assert "… [9,6" in long and " characters cut] …" in long
    assert long.endswith("xxx: do this instead (hint)")  # what to do survives the cut
    assert len(long) <= len("legato: error: ") + MAX_ERROR_CHARS + len(" (hint)")
    assert "\n" not in long


def test_number_in_range() -> None:
    limit = number_in(int, 1, 1000, "a number of runs (1 to 1000)")
    assert (limit("1"), limit("1000")) == (1, 1000)
    seconds = number_in(float, 0.0, 3600.0, "seconds above 0", above_low=True)
    assert seconds("0.5") == 0.5
    for bad, convert in [
        ("0", limit),
        ("1001", limit),
        ("2.5", limit),
        ("abc", limit),
        ("", limit),
        ("9" * 5000, limit),
        ("0", seconds),
        ("nan", seconds),
        ("inf", seconds),
        ("-inf", seconds),
        ("1e400", seconds),
        ("3600.1", seconds),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match="not ") as raised:
            convert(bad)
        assert shown(bad) in str(raised.value)


def test_nonempty() -> None:
    assert nonempty("x") == "x"
    for blank in ("", "  "):
        with pytest.raises(argparse.ArgumentTypeError, match="must not be empty"):
            nonempty(blank)


def test_bad_arguments() -> None:
    assert bad_argument(["runs", "list", "--workflow", "café"]) is None
    assert "NUL byte" in (bad_argument(["a", "b\x00c"]) or "")
    assert "not valid UTF-8" in (bad_argument(["caf\udce9"]) or "")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://u@h:abc/db", "bad port in database URL 'postgresql://u@h:abc/db'"),
        ("postgresql://u@h:/db", "bad port in database URL"),
        ("postgresql://u@h:0/db", "bad port 0"),
        ("postgresql://u@h:-1/db", "bad port -1"),
        ("postgresql://u@h:65536/db", "bad port 65536"),
        ("postgresql://u@h:70000/db", "bad port 70000"),
        ("postgresql://u@h/db?port=x", "bad port 'x'"),
        ("postgresql://u@h/db?port=0", "bad port '0'"),
        ("postgresql://u@/db?host=a:5432&host=b:99999", "bad port '99999'"),
    ],
)
def test_ports_outside_1_to_65535_are_refused(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError, match="1 to 65535") as raised:
        resolve_url(url)
    assert named in str(raised.value)


def test_valid_ports_and_hidden_passwords() -> None:
    assert resolve_url("postgresql://u@h:1/db").port == 1
    assert resolve_url("postgresql://u@h:65535/db").port == 65535
    assert resolve_url("postgresql://u@/db?host=a:5432&host=b:5433").query["host"] == (
        "a:5432",
        "b:5433",
    )
    with pytest.raises(ConfigurationError) as raised:
        resolve_url("postgresql://u:hunter2@h:abc/db")
    assert "hunter2" not in str(raised.value)
    assert "u:***@h:abc" in str(raised.value)


def test_parse_json_refuses_a_lone_surrogate_but_not_a_pair() -> None:
    assert parse_json('["\\ud83d\\ude00"]', "--input") == ["\U0001f600"]
    with pytest.raises(InvalidInput, match="lone UTF-16 surrogate"):
        parse_json('{"name": "\\udc00"}', "--input")
