"""Schema names: the one check of every ``schema`` Legato takes, the default, and the
schema an engine made by ``create_engine`` targets."""

from __future__ import annotations

import os
import re

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.errors import ConfigurationError
from legato.outages import where
from legato.schema import SCHEMA_PLACEHOLDER

DEFAULT_SCHEMA = "legato"
# NOTIFY channels are named ``<schema>_<purpose>_v1`` and PostgreSQL truncates or refuses
# identifiers over 63 bytes; the longest suffix ("_events_v1", "_decide_v1", "_cancel_v1")
# is 10 characters (tests/unit/test_schema_names.py derives it from the channel functions).
IDENTIFIER_LIMIT = 63
LONGEST_DERIVED_SUFFIX = 10
MAX_SCHEMA_NAME_LENGTH = IDENTIFIER_LIMIT - LONGEST_DERIVED_SUFFIX
_IDENTIFIER = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_SCHEMA_NAME_LENGTH - 1}}}")


def validate_schema_name(schema: object) -> str:
    """A schema name Legato accepts: at most 53 ASCII letters, digits and underscores, not
    starting with a digit, so that every name derived from it fits PostgreSQL's limit, and
    not one PostgreSQL keeps for itself (``pg_...``, ``information_schema``).

    The one check of every ``schema`` Legato takes: ``--schema``, ``LEGATO_SCHEMA``,
    ``create_engine``, ``Client.connect``, ``SyncClient``, the migrations."""
    if not isinstance(schema, str):
        raise ConfigurationError(
            f"schema={schema!r} must be a string naming a PostgreSQL schema, e.g. 'legato'"
        )
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: use at most {MAX_SCHEMA_NAME_LENGTH} ASCII "
            "letters, digits and underscores, not starting with a digit (Legato's NOTIFY "
            f"channels append up to {LONGEST_DERIVED_SUFFIX} characters to it and PostgreSQL "
            f"names stop at {IDENTIFIER_LIMIT})"
        )
    if schema.lower().startswith("pg_") or schema.lower() == "information_schema":
        raise ConfigurationError(
            f"invalid schema name {schema!r}: PostgreSQL reserves pg_... and "
            "information_schema for its own catalogs; pick another name, e.g. 'legato'"
        )
    return schema


def resolve_schema(schema: str | None) -> str:
    """``schema`` (``--schema``), else ``LEGATO_SCHEMA``, else ``legato``; validated. An
    empty ``schema`` is refused, not taken for the default."""
    if schema is None:
        schema = os.environ.get("LEGATO_SCHEMA") or DEFAULT_SCHEMA
    return validate_schema_name(schema)


def engine_schema(engine: object, owner: str) -> str:
    """The schema an engine made by ``create_engine`` targets; ``ConfigurationError``
    naming ``owner`` for anything else (an engine of ``create_async_engine`` names no
    schema, so Legato could not tell which tables to use)."""
    if not isinstance(engine, AsyncEngine):
        raise ConfigurationError(
            f"{owner} needs an AsyncEngine from legato.create_engine(url, schema), "
            f"not {type(engine).__name__}"
        )
    mapping = engine.get_execution_options().get("schema_translate_map") or {}
    if SCHEMA_PLACEHOLDER not in mapping:
        raise ConfigurationError(
            f"{owner}: the engine for {where(engine.url)} was not made by "
            "legato.create_engine(url, schema), so it names no Legato schema: make it with "
            "legato.create_engine, which takes the same engine options"
        )
    return validate_schema_name(mapping[SCHEMA_PLACEHOLDER])
