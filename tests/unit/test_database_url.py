"""``resolve_url``: the plain PostgreSQL URLs users already have become asyncpg URLs."""

from __future__ import annotations

import pytest

from legato.db.schema_names import validate_schema_name
from legato.db.urls import resolve_url
from legato.errors import ConfigurationError


def test_plain_urls_become_asyncpg_urls() -> None:
    url = resolve_url("postgresql://app:pw@db.example:5433/app")
    assert url.drivername == "postgresql+asyncpg"
    assert (url.host, url.port, url.database, url.username) == ("db.example", 5433, "app", "app")
    assert resolve_url("postgres://app@db/app").drivername == "postgresql+asyncpg"


def test_unix_socket_directory() -> None:
    url = resolve_url("postgresql://app@/app?host=/run/postgresql")
    assert url.query["host"] == "/run/postgresql"
    assert url.host is None


def test_libpq_sslmode_becomes_asyncpg_ssl() -> None:
    url = resolve_url("postgresql://app@db/app?sslmode=require")
    assert "sslmode" not in url.query
    assert url.query["ssl"] == "require"


@pytest.mark.parametrize("raw", ["mysql://x@h/db", "not a url"])
def test_bad_urls_are_configuration_errors(raw: str) -> None:
    with pytest.raises(ConfigurationError):
        resolve_url(raw)


@pytest.mark.parametrize("name", ["x;drop", 'x"y', "it's", "1abc", "a" * 64, "", "x y"])
def test_schema_names_must_be_plain_identifiers(name: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        validate_schema_name(name)


def test_schema_names_accepted() -> None:
    assert validate_schema_name("legato") == "legato"
    assert validate_schema_name("Tenant_2") == "Tenant_2"
