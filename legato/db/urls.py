"""Database URLs: the plain ``postgresql://`` URLs users have, made asyncpg SQLAlchemy
URLs, with their ports checked and the libpq parameters asyncpg takes from a DSN only
set apart."""

from __future__ import annotations

import os
import re

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from legato.errors import ConfigurationError

_PORT_RULE = "use a number from 1 to 65535 (PostgreSQL's default is 5432)"
_PASSWORD = re.compile(r"(://[^/?#@:]*):[^/?#@]*@")


def _redacted(raw: str) -> str:
    """``raw`` quoted, its password hidden, cut short: for an error message."""
    text = repr(_PASSWORD.sub(r"\1:***@", raw))
    return text if len(text) <= 200 else text[:199] + "…"


def _query_values(url: URL, key: str) -> list[str]:
    value = url.query.get(key, ())
    return [value] if isinstance(value, str) else list(value)


def _valid_port(port: int | str) -> bool:
    """1 to 65535: asyncpg would wrap 70000 to 4464 and take 0 for the default 5432,
    silently reaching another server."""
    if isinstance(port, str):
        if not port.isascii() or not port.isdigit():
            return False
        port = int(port)
    return 1 <= port <= 65535


def resolve_url(url: str | None) -> URL:
    """``--database-url``, else ``LEGATO_DATABASE_URL``, as an asyncpg SQLAlchemy URL.

    Accepts the plain ``postgresql://`` / ``postgres://`` URLs users already have,
    including a Unix-socket directory given as ``?host=/dir``. Ports (in the URL,
    ``?port=`` or ``?host=name:port``) must be 1 to 65535. libpq's TLS parameters
    (``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``, ...) and ``application_name``
    mean what they mean to libpq (``create_engine`` hands them to asyncpg).
    """
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"database URL {url!r} must be a string or a sqlalchemy URL")
    raw = url or os.environ.get("LEGATO_DATABASE_URL")
    if not raw:
        raise ConfigurationError(
            "no database given: pass --database-url or set LEGATO_DATABASE_URL "
            "(e.g. postgresql://user:password@localhost:5432/app)"
        )
    try:
        parsed = make_url(raw)
    except ArgumentError:
        raise ConfigurationError(
            f"not a database URL: {_redacted(raw)}: write it as "
            "postgresql://user:password@host:5432/database"
        ) from None
    except ValueError:  # SQLAlchemy's int() of the port: ``host:abc``, ``host:``
        if "[" in raw and "]" not in raw:
            raise ConfigurationError(
                f"database URL {_redacted(raw)} opens an IPv6 address with '[' and never "
                "closes it: write it as postgresql://user@[::1]:5432/database"
            ) from None
        raise ConfigurationError(
            f"bad port in database URL {_redacted(raw)}: {_PORT_RULE}"
        ) from None
    unknown = sorted(set(parsed.query) - _SUPPORTED_PARAMETERS)
    if unknown:
        hint = _INSTEAD.get(unknown[0], "")
        raise ConfigurationError(
            f"database URL parameter {unknown[0]!r} is not supported (Legato connects with "
            f"asyncpg){hint}; supported: {', '.join(sorted(_SUPPORTED_PARAMETERS))}"
        )
    for mode in _query_values(parsed, "sslmode") + _query_values(parsed, "ssl"):
        if mode not in _SSL_MODES:
            raise ConfigurationError(
                f"sslmode {mode[:40]!r} in the database URL is not one of "
                f"{', '.join(_SSL_MODES)}"
            )
    ports = [parsed.port, *_query_values(parsed, "port")]
    ports += [host.rpartition(":")[2] for host in _query_values(parsed, "host") if ":" in host]
    for port in ports:
        if port is not None and not _valid_port(port):
            raise ConfigurationError(
                f"bad port {port!r} in database URL {_redacted(raw)}: {_PORT_RULE}"
            )
    if parsed.drivername not in ("postgresql", "postgres", "postgresql+asyncpg"):
        raise ConfigurationError(
            f"unsupported database URL scheme {parsed.drivername!r}: Legato needs PostgreSQL "
            "(postgresql://...)"
        )
    sslmode = parsed.query.get("sslmode")
    if sslmode is not None:  # libpq's name; asyncpg takes the same values as ``ssl``
        parsed = parsed.difference_update_query(["sslmode"])
        if "ssl" not in parsed.query:
            parsed = parsed.update_query_dict({"ssl": sslmode})
    return parsed.set(drivername="postgresql+asyncpg")


_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# libpq's names for what asyncpg calls otherwise, or sets elsewhere.
_INSTEAD = {
    "connect_timeout": ": use ?timeout=SECONDS for the connect timeout",
    "options": ": set server settings with create_engine(connect_args={'server_settings': "
    "{...}}), or on the role (ALTER ROLE ... SET ...)",
    "keepalives": ": asyncpg keeps its own TCP keepalives",
}


# libpq parameters asyncpg takes from a DSN only, not as the keywords SQLAlchemy makes of
# a URL's query: ``create_engine`` moves them into a DSN of their own in ``connect_args``
# (the URL's host, port and database still win, being keywords).
DSN_ONLY_PARAMETERS = (
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcrl",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
)


# What a URL's query may hold: asyncpg's connect() keywords (SQLAlchemy hands the query
# over as keywords), libpq's ``sslmode`` and the parameters set apart for a DSN.
_SUPPORTED_PARAMETERS = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "passfile",
        "service",
        "servicefile",
        "database",
        "timeout",
        "command_timeout",
        "statement_cache_size",
        "prepared_statement_cache_size",
        "max_cached_statement_lifetime",
        "max_cacheable_statement_size",
        "ssl",
        "sslmode",
        "direct_tls",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
        "application_name",
        *DSN_ONLY_PARAMETERS,
    }
)


def split_libpq_parameters(url: URL) -> tuple[URL, dict[str, str]]:
    """``url`` without the query parameters asyncpg takes from a DSN only
    (``DSN_ONLY_PARAMETERS``, ``application_name``), and those parameters; pure."""
    names = [*DSN_ONLY_PARAMETERS, "application_name"]
    taken = {name: _query_values(url, name)[-1] for name in names if name in url.query}
    return url.difference_update_query(names), taken
