"""What a database failure means, said once for every caller: the ``DatabaseUnavailable``
a failed connect stands for, an outage told from a bug (the loops, the wake-ups and the
relay retry the one, crash on the other), and the one log line each gets."""

from __future__ import annotations

import logging
import re
import socket
import ssl
from collections.abc import Iterator

import asyncpg
from sqlalchemy import URL
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from legato.errors import DatabaseUnavailable

# Connection failures that retrying does not cure: the server answered and said no.
_LASTING = (
    asyncpg.InvalidPasswordError,
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
)
# The server is there but not taking connections yet (starting, stopping, full).
_PASSING = (
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
)


def where(url: URL) -> str:
    """Where a URL points, for messages: ``host:port/database`` (or the socket directory)."""
    host = url.host or url.query.get("host") or "localhost"
    if isinstance(host, tuple):
        host = ",".join(host)
    port = f":{url.port or 5432}" if not str(host).startswith("/") else ""
    return f"{host}{port}/{url.database or ''}"


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it wraps: SQLAlchemy's driver error, each ``__cause__``."""
    cause: BaseException | None = error
    seen: list[BaseException] = []
    while cause is not None and cause not in seen:
        seen.append(cause)
        yield cause
        cause = cause.orig if isinstance(cause, DBAPIError) else cause.__cause__


_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def outage_cause(error: BaseException) -> str:
    """Why the server could not be reached, in a few words and without errno numbers
    (``[Errno 2] No such file or directory`` from a Unix-socket connect says nothing to
    an operator): for messages and log lines."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, FileNotFoundError):
        return "no server socket in that directory"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({str(error.strerror or error).lower()})"
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
        return "connection lost"
    text = _ERRNO.sub("", str(error)).strip().splitlines()
    return text[0] if text else type(error).__name__


def _unreachable(error: BaseException) -> bool:
    return isinstance(error, (OSError, *_PASSING))


def outage(error: BaseException) -> str | None:
    """``the database is unavailable (<cause>)`` when ``error`` is a failure to reach the
    database or a connection to it lost, None for anything else: what the loops log for
    an outage, whichever layer (driver, pool, SQLAlchemy) raised it."""
    for cause in causes(error):
        if isinstance(cause, DatabaseUnavailable):
            return f"the database is unavailable ({cause})"
        if isinstance(cause, _LASTING):
            return f"the database is unavailable ({cause})"
        if _unreachable(cause):
            return f"the database is unavailable ({outage_cause(cause)})"
    return None


def as_unavailable(error: BaseException, url: URL) -> DatabaseUnavailable | None:
    """The ``DatabaseUnavailable`` a failure to connect to ``url`` stands for (refused,
    unknown host, timeout, wrong password or role, no such database, server starting),
    or None when ``error`` is something else. ``retryable`` says whether waiting helps."""
    for cause in causes(error):  # SQLAlchemy wraps the driver's error
        if isinstance(cause, _LASTING):
            return DatabaseUnavailable(
                f"cannot connect to the database at {where(url)}: {cause} "
                "(check the user, password and database in --database-url / "
                "LEGATO_DATABASE_URL)",
                retryable=False,
            )
        if isinstance(cause, ssl.SSLError):  # an OSError, but one that waiting won't cure
            return DatabaseUnavailable(_tls_failure(cause, url), retryable=False)
        if _unreachable(cause):
            return DatabaseUnavailable(
                f"cannot reach the database at {where(url)}: {outage_cause(cause)} "
                "(is PostgreSQL running there, and is --database-url / LEGATO_DATABASE_URL "
                "right?)"
            )
    return None


def _tls_failure(error: ssl.SSLError, url: URL) -> str:
    """What a failed TLS handshake with ``url``'s server means, and what to check."""
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = (error.verify_message or str(error)).rstrip(".")
        if "mismatch" in reason:  # "Hostname mismatch", "IP address mismatch"
            hint = (
                f"the certificate is not issued for {url.host or 'the host'!r}: connect by a "
                "name the certificate lists, or use sslmode=verify-ca"
            )
        else:
            hint = "check that sslrootcert= names the CA that signed the server's certificate"
        return f"the database server at {where(url)} failed TLS verification: {reason} ({hint})"
    return f"TLS with the database server at {where(url)} failed: {error.reason or error}"


def is_database_error(error: BaseException) -> bool:
    """Whether ``error`` came from the database or the connection to it: worth retrying
    as it is, unlike a bug in the code."""
    return isinstance(
        error,
        DBAPIError
        | DatabaseUnavailable
        | PoolTimeout
        | PendingRollbackError  # a connection that died inside a transaction
        | OSError
        | asyncpg.PostgresError
        | asyncpg.InterfaceError
        | asyncpg.exceptions.InternalClientError,  # a connection killed mid-operation
    )


def database_failure(error: BaseException) -> str:
    """A database error (``is_database_error``) as one log line: an outage says the
    database is unavailable and why in a few words, whichever layer raised it; any other
    (a deadlock, a killed backend) is named as ``one_line`` names it."""
    return outage(error) or one_line(error)


def one_line(error: BaseException) -> str:
    """An error as one log line: its type and the first line of its message (the
    driver's own error for a wrapped database error)."""
    cause = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__


def traceback_at_debug(logger: logging.Logger, error: BaseException) -> BaseException | None:
    return error if logger.isEnabledFor(logging.DEBUG) else None
