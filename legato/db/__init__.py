"""The schema-translated engine: ``create_engine``, the settings of every Legato session,
the pooler it sits behind and the engine wake-ups LISTEN through.

Its neighbours: ``urls.py`` (the URLs it takes), ``schema_names.py`` (the schemas it
targets), ``server_check.py`` (what a start checks of the server and the schema)."""

from __future__ import annotations

import logging
import os
import re
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import URL, Connection, Engine, event
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from legato.arguments import check_count, check_positive_seconds
from legato.db.schema_names import resolve_schema
from legato.db.urls import resolve_url, split_libpq_parameters
from legato.errors import ConfigurationError
from legato.schema import SCHEMA_PLACEHOLDER

# Every Legato session plans its prepared statements once, generically. Left to
# ``auto``, PostgreSQL keeps re-planning the hot statements for their parameters, since
# a generic plan over the partitioned tables looks dearer than a custom one; planning
# was most of their server time (a decision's write statement 2.5 - 5.3 ms -> 1.6 ms,
# docs/performance.md). Partitions are still pruned, at executor start-up. A
# transactional task's body gets PostgreSQL's default back (``transactions.bound``).
SESSION_SETTINGS = {"plan_cache_mode": "force_generic_plan"}

# The safety defaults of every Legato session (``create_engine``'s keywords override
# them; None leaves the server's own): a lock someone else's transaction holds fails the
# waiting statement after ``lock_timeout`` (the loop logs it and retries next tick)
# instead of hanging the loop, and a session left idle inside a transaction (a frozen
# process holding row locks) is ended by the server.
DEFAULT_LOCK_TIMEOUT = "30s"
DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT = "5min"

# What ``pg_stat_activity.application_name`` shows for a Legato session whose user set
# none (in the URL or ``connect_args``' server_settings): ``legato`` in a host's process,
# ``legato <command>`` in the CLI's (``process_application_name``), so connections count per kind.
DEFAULT_APPLICATION_NAME = "legato"
_process_application_name = DEFAULT_APPLICATION_NAME


@contextmanager
def process_application_name(application_name: str) -> Iterator[None]:
    """Within it, the ``application_name`` of the engines ``create_engine`` makes unless
    given one: the CLI's commands run in it as ``legato worker``, ``legato decider``, ..."""
    global _process_application_name
    previous, _process_application_name = _process_application_name, application_name
    try:
        yield
    finally:
        _process_application_name = previous


# ``pooler``: what sits between Legato and the server. None (a direct connection, or a
# session-mode pooler, which keeps one server connection per client connection) or
# "transaction" (PgBouncer, Supabase's pooler, RDS Proxy in transaction mode: a server
# connection only for the length of a transaction).
TRANSACTION_POOLER = "transaction"
POOLER_CHOICES = ("none", "session", TRANSACTION_POOLER)

# Where ``create_engine`` keeps the settings ``listen_engine`` needs (execution options).
_POOLER_OPTION = "legato_pooler"
_LISTEN_URL_OPTION = "legato_listen_url"
_APPLICATION_NAME_OPTION = "legato_application_name"

log = logging.getLogger("legato")


def resolve_pooler(pooler: str | None) -> str | None:
    """``pooler``, else ``LEGATO_POOLER``: "transaction", or None for a direct connection
    or a session-mode pooler ("none", "session" or unset)."""
    chosen = pooler if pooler is not None else os.environ.get("LEGATO_POOLER", "")
    if chosen.strip().lower() in ("", "none", "session"):
        return None
    if chosen.strip().lower() == TRANSACTION_POOLER:
        return TRANSACTION_POOLER
    raise ConfigurationError(
        f"unknown pooler {chosen!r} (pooler= / LEGATO_POOLER): use 'transaction' behind a "
        "transaction-mode pooler such as PgBouncer's pool_mode=transaction, or 'none' / "
        "'session' for a direct connection or a session-mode pooler"
    )


def session_settings(
    lock_timeout: str | None, idle_in_transaction_session_timeout: str | None
) -> dict[str, str]:
    """The settings of a Legato session: ``SESSION_SETTINGS`` and the safety timeouts
    (a None timeout is left to the server); pure."""
    settings = dict(SESSION_SETTINGS)
    if lock_timeout is not None:
        settings["lock_timeout"] = lock_timeout
    if idle_in_transaction_session_timeout is not None:
        settings["idle_in_transaction_session_timeout"] = idle_in_transaction_session_timeout
    return settings


def create_engine(
    url: str | URL | None = None,
    schema: str | None = None,
    *,
    pooler: str | None = None,
    listen_url: str | URL | None = None,
    lock_timeout: str | None = DEFAULT_LOCK_TIMEOUT,
    idle_in_transaction_session_timeout: str | None = DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
    application_name: str | None = None,
    **engine_options: Any,
) -> AsyncEngine:
    """An async engine whose Core statements target ``schema`` (``schema_translate_map``),
    its sessions set up with ``session_settings`` (``connect_args`` given here win).

    ``pooler="transaction"`` (or ``LEGATO_POOLER=transaction``) for a transaction-mode
    pooler: no statement is prepared under a name (asyncpg's and SQLAlchemy's statement
    caches off: every statement is parsed with its execution, in one exchange), and the
    settings go with each transaction instead of the connection's start-up (which
    PgBouncer refuses). Wake-ups LISTEN on ``listen_url`` (or
    ``LEGATO_LISTEN_DATABASE_URL``), a direct connection to the server; without one the
    loops poll (``listen_engine``).

    Sessions show ``application_name`` (by default the process's, ``process_application_name``) in
    ``pg_stat_activity`` unless the URL's ``?application_name=`` or ``connect_args``'
    server_settings name one; libpq's TLS
    parameters in the URL (``?sslmode=verify-full&sslrootcert=ca.pem``) apply.

    No ``pool_pre_ping`` by default: the loops check out a connection per statement, so a
    ping would double their round trips, while a disconnect error already makes
    SQLAlchemy invalidate the whole pool. After a database restart a loop loses about
    one tick (one log line, retried), and ``Client`` reads retry once on a fresh
    connection. Pass ``pool_pre_ping=True`` for an engine that idles for long.
    """
    _check_engine_arguments(pooler, engine_options)
    for option, value in (
        ("lock_timeout", lock_timeout),
        ("idle_in_transaction_session_timeout", idle_in_transaction_session_timeout),
    ):
        _check_duration_setting(option, value)
    target, libpq = split_libpq_parameters(url if isinstance(url, URL) else resolve_url(url))
    mode = resolve_pooler(pooler)
    listen = listen_url or os.environ.get("LEGATO_LISTEN_DATABASE_URL") or None
    listen_target = None if listen is None or mode is None else _as_url(listen)
    # LIFO: each loop gets back the connection it just used, whose prepared statements
    # (asyncpg's per-connection cache, the backend's plans) are warm; a FIFO pool hands
    # out the coldest one, so every hot statement is prepared again on every connection.
    # 20 kept, no overflow: an overflow connection is closed when it is returned to a
    # full pool, so a load that swings around the pool's size (a worker's transactional
    # attempts) opened and closed a connection per few attempts, each paying a server
    # process, the session settings and every statement's prepare again (half a
    # transactional worker's throughput; docs/design.md, "A pool without overflow").
    # Connections are still opened only when needed.
    options: dict[str, Any] = {
        "pool_size": 20,
        "max_overflow": 0,
        "pool_pre_ping": False,
        "pool_use_lifo": True,
    }
    options.update(engine_options)
    connect_args = dict(options.get("connect_args", {}))
    settings = {
        **session_settings(lock_timeout, idle_in_transaction_session_timeout),
        **connect_args.get("server_settings", {}),
    }
    in_url = libpq.pop("application_name", None)
    named = (
        settings.pop("application_name", None)
        or in_url
        or application_name
        or _process_application_name
    )
    # The server takes each start-up setting as a string without NUL (asyncpg refuses
    # the rest at the first connect, as an InterfaceError or an "invalid startup packet").
    for key, value in {**settings, "application_name": named}.items():
        if not isinstance(value, str) or "\x00" in value:
            raise ConfigurationError(
                f"create_engine: the session setting {key}={value!r:.80} must be a string "
                "without NUL characters"
            )
    if libpq and "dsn" not in connect_args:
        connect_args["dsn"] = "postgresql://?" + urlencode(libpq)
    if mode == TRANSACTION_POOLER:
        # asyncpg parses an unnamed statement with each execution when its cache is off
        # (one exchange: Parse, Bind, Execute, Sync), so no statement outlives the
        # server connection it was parsed on; SQLAlchemy's own cache would keep named ones.
        connect_args.setdefault("statement_cache_size", 0)
        connect_args.setdefault("prepared_statement_cache_size", 0)
        # A start-up parameter PgBouncer passes on (it refuses the others).
        connect_args["server_settings"] = {"application_name": named}
    else:
        connect_args["server_settings"] = {"application_name": named, **settings}
    options["connect_args"] = connect_args
    schema = resolve_schema(schema)
    try:
        engine = create_async_engine(target, **options)
    except (TypeError, ArgumentError) as error:  # an option SQLAlchemy does not take
        raise ConfigurationError(
            f"create_engine: SQLAlchemy refused the engine options {sorted(engine_options)}: "
            f"{error}"
        ) from None
    if mode == TRANSACTION_POOLER:
        _set_per_transaction(engine, settings)
    return engine.execution_options(
        schema_translate_map={SCHEMA_PLACEHOLDER: schema},
        **{
            _POOLER_OPTION: mode,
            _LISTEN_URL_OPTION: listen_target,
            _APPLICATION_NAME_OPTION: named,
        },
    )


# A PostgreSQL time setting as the server parses it: a number and an optional unit.
_DURATION_SETTING = re.compile(r"\d+(\.\d+)?\s*(us|ms|s|min|h|d)?")


def _check_duration_setting(option: str, value: object) -> None:
    """``lock_timeout=`` / ``idle_in_transaction_session_timeout=``: None, or a PostgreSQL
    duration string ("30s", "500ms", "0" for none); else ``ConfigurationError``."""
    if value is None or (isinstance(value, str) and _DURATION_SETTING.fullmatch(value.strip())):
        return
    raise ConfigurationError(
        f"{option}={value!r} must be a PostgreSQL duration string such as '30s', '500ms' or "
        "'0' (no limit), or None to leave the server's own setting"
    )


def _check_engine_arguments(pooler: object, engine_options: dict[str, Any]) -> None:
    """The options ``create_engine`` reads or SQLAlchemy would take without complaint
    and fail on later (a negative pool size, a zero timeout): ``ConfigurationError``
    naming the option. SQLAlchemy's "no limit" values (``pool_size=0``,
    ``max_overflow=-1``) are refused too: PostgreSQL's ``max_connections`` is the limit
    they would run into."""
    if pooler is not None and not isinstance(pooler, str):
        raise ConfigurationError(f"pooler={pooler!r} must be 'transaction', 'session' or None")
    if "pool_size" in engine_options:
        check_count("pool_size", engine_options["pool_size"])
    if "max_overflow" in engine_options:
        check_count("max_overflow", engine_options["max_overflow"], least=0)
    if "pool_timeout" in engine_options:
        check_positive_seconds("pool_timeout", engine_options["pool_timeout"])
    connect_args = engine_options.get("connect_args", {})
    if not isinstance(connect_args, dict):
        raise ConfigurationError(
            f"connect_args={connect_args!r} must be a dict of asyncpg.connect() arguments"
        )
    settings = connect_args.get("server_settings", {})
    if not isinstance(settings, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in settings.items()
    ):
        raise ConfigurationError(
            f"connect_args['server_settings']={settings!r} must be a dict of setting names "
            "to string values, e.g. {'application_name': 'billing'}"
        )


def _as_url(url: str | URL) -> URL:
    return url if isinstance(url, URL) else resolve_url(url)


def _set_per_transaction(engine: AsyncEngine, settings: dict[str, str]) -> None:
    """Behind a transaction pooler, ``settings`` as ``SET LOCAL`` at each transaction's
    start (one statement more per transaction): a session setting would stay on
    whichever server connection ran it, and PgBouncer refuses start-up parameters."""
    if not settings:
        return
    statement = "SELECT " + ", ".join(
        f"set_config('{name}', {_literal(value)}, true)" for name, value in sorted(settings.items())
    )

    @event.listens_for(engine.sync_engine, "begin")
    def _apply(conn: Connection) -> None:
        conn.exec_driver_sql(statement)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def pooler_of(engine: AsyncEngine) -> str | None:
    """The ``pooler`` ``engine`` was made for ("transaction", or None)."""
    mode = engine.get_execution_options().get(_POOLER_OPTION)
    return str(mode) if mode else None


_WARNED_POLLING: weakref.WeakSet[Engine] = weakref.WeakSet()


def listen_engine(engine: AsyncEngine) -> AsyncEngine | None:
    """The engine wake-ups LISTEN through: ``engine`` itself on a direct connection or a
    session pooler; behind a transaction pooler (where LISTEN would stay on a server
    connection other clients then get), a one-connection engine on ``listen_url``, or
    None when there is none, so the loops poll (said once per engine, at WARNING).
    The caller disposes of an engine that is not ``engine``."""
    if pooler_of(engine) != TRANSACTION_POOLER:
        return engine
    listen = engine.get_execution_options().get(_LISTEN_URL_OPTION)
    if listen is None:
        if engine.sync_engine not in _WARNED_POLLING:
            _WARNED_POLLING.add(engine.sync_engine)
            log.warning(
                "behind a transaction pooler without a listen URL, wake-ups are off and "
                "the loops poll: set LEGATO_LISTEN_DATABASE_URL (listen_url=) to a direct "
                "connection to the server for LISTEN/NOTIFY"
            )
        return None
    schema = engine.get_execution_options()["schema_translate_map"][SCHEMA_PLACEHOLDER]
    named = engine.get_execution_options()[_APPLICATION_NAME_OPTION]
    return create_engine(listen, schema, pool_size=1, max_overflow=0, application_name=named)
