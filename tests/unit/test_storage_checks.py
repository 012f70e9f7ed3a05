"""Pure storage checks: server version, migration mismatch messages, schema-name limits."""

from __future__ import annotations

import inspect

import pytest

from legato.db.schema_names import IDENTIFIER_LIMIT, MAX_SCHEMA_NAME_LENGTH, validate_schema_name
from legato.db.server_check import require_supported_server, schema_mismatch
from legato.engine.repositories import notify
from legato.errors import ConfigurationError, IncompatibleDatabase


@pytest.mark.parametrize(("version_num", "major"), [(130011, 13), (140000, 14), (149999, 14)])
def test_servers_before_15_are_refused(version_num: int, major: int) -> None:
    with pytest.raises(IncompatibleDatabase) as caught:
        require_supported_server(version_num)
    message = str(caught.value)
    assert f"PostgreSQL {major} (server_version_num {version_num}) is too old" in message
    assert "PostgreSQL 15 or newer" in message


@pytest.mark.parametrize("version_num", [150000, 170004, 180006])
def test_servers_from_15_are_accepted(version_num: int) -> None:
    require_supported_server(version_num)


def test_an_older_schema_is_told_to_upgrade_the_schema() -> None:
    for applied in ([], ["0001"]):
        message = schema_mismatch("legato", applied, "0002")
        assert "this Legato needs 0002: run `legato db upgrade`" in message


def test_a_newer_schema_is_told_to_upgrade_the_package() -> None:
    message = schema_mismatch("tenant", ["0007"], "0002")
    assert "schema 'tenant' is at migration 0007, newer than this Legato package" in message
    assert "migrations up to 0002" in message
    assert "upgrade the legato package" in message
    assert "legato db upgrade" not in message


def _channels(schema: str) -> list[str]:
    makers = [
        function
        for name, function in inspect.getmembers(notify, inspect.isfunction)
        if name.endswith("_channel")
    ]
    assert len(makers) >= 4
    return [maker(schema) for maker in makers]


def test_the_schema_limit_is_the_longest_channel_that_fits() -> None:
    longest = "s" * MAX_SCHEMA_NAME_LENGTH
    assert validate_schema_name(longest) == longest
    lengths = [len(channel.encode()) for channel in _channels(longest)]
    # Every channel fits, and at least one would not with one more character.
    assert max(lengths) == IDENTIFIER_LIMIT


@pytest.mark.parametrize(
    "name", ["s" * (MAX_SCHEMA_NAME_LENGTH + 1), "s" * 63, "schéma", "tenant-2"]
)
def test_schema_names_over_the_limit_or_outside_ascii_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        validate_schema_name(name)
    message = str(caught.value)
    assert repr(name) in message
    assert f"at most {MAX_SCHEMA_NAME_LENGTH} ASCII letters, digits and underscores" in message
