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


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("postgresql://a@h/db?connect_timeout=5", "'connect_timeout' is not supported"),
        ("postgresql://a@h/db?connect_timeout=5", "use ?timeout=SECONDS"),
        ("postgresql://a@h/db?options=-c%20x%3Dy", "'options' is not supported"),
        ("postgresql://a@h/db?nosuchparam=1", "'nosuchparam' is not supported"),
        ("postgresql://a@h/db?sslmode=bogus", "sslmode 'bogus' in the database URL is not one"),
        ("postgresql://[::1/db", "opens an IPv6 address with '['"),
        ("notaurl", "write it as postgresql://user:password@host:5432/database"),
    ],
)
def test_what_the_driver_would_refuse_at_connect_is_refused_by_name(raw: str, says: str) -> None:
    """These failed at the first connect, as the driver's TypeError or InterfaceError."""
    with pytest.raises(ConfigurationError) as raised:
        resolve_url(raw)
    assert says in str(raised.value)


def test_the_driver_parameters_pass() -> None:
    url = resolve_url("postgresql://a@h/db?timeout=5&command_timeout=30&sslmode=verify-full")
    assert dict(url.query) == {"timeout": "5", "command_timeout": "30", "ssl": "verify-full"}
