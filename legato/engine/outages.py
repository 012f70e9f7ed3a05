"""Telling a database outage from a bug, and saying either in one log line: the one
classifier the loops, the wake-ups and the relay share."""

from __future__ import annotations

import logging

import asyncpg
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from legato.db import outage
from legato.errors import DatabaseUnavailable


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
