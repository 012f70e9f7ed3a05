"""The ``legato`` command line.

Each command group lives in its own module and registers its subcommands on the
root parser; every command takes ``--database-url`` / ``LEGATO_DATABASE_URL`` and
``--schema`` / ``LEGATO_SCHEMA``. Errors Legato raises on purpose print one line
and exit non-zero; nothing prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from legato.errors import LegatoError

N = TypeVar("N", int, float)

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="PostgreSQL URL, e.g. postgresql://user:pass@host/db or "
        "postgresql://user@/db?host=/run/postgresql (default: $LEGATO_DATABASE_URL)",
    )
    parser.add_argument(
        "--schema",
        help="PostgreSQL schema holding Legato's tables (default: $LEGATO_SCHEMA or legato)",
    )


def build_parser() -> argparse.ArgumentParser:
    from legato.cli import bench as bench_commands
    from legato.cli import db as db_commands
    from legato.cli import runtime as runtime_commands
    from legato.cli import schedules as schedule_commands

    parser = argparse.ArgumentParser(
        prog="legato",
        description="Legato: durable workflows on PostgreSQL.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    db_commands.register(commands)
    runtime_commands.register(commands)
    bench_commands.register(commands)
    schedule_commands.register(commands)
    return parser


def number_at_least(parse: Callable[[str], N], minimum: N, what: str) -> Callable[[str], N]:
    """An argparse ``type=`` that accepts numbers ``>= minimum`` and names ``what``."""

    def convert(value: str) -> N:
        try:
            number = parse(value)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError(f"not {what}: {value!r}")
        return number

    return convert


def _one_line(message: str) -> str:
    """A multi-line message (pydantic's validation errors) folded onto one line."""
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith("For further information")]
    return "; ".join(kept)


def _describe(error: BaseException) -> str:
    if isinstance(error, LegatoError):
        return _one_line(str(error))
    if isinstance(error, TimeoutError):  # an OSError, but not a connection problem
        return f"timed out: {error}"
    if isinstance(error, OSError | ConnectionError):
        return f"cannot reach the database: {error}"
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, DBAPIError):
        return f"database error: {error.orig}".splitlines()[0]
    return f"{type(error).__name__}: {error}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return asyncio.run(handler(args))
    except KeyboardInterrupt:
        return 130
    except (LegatoError, OSError, ConnectionError) as error:
        print(f"legato: error: {_describe(error)}", file=sys.stderr)
        return 1
    except Exception as error:
        from sqlalchemy.exc import DBAPIError

        if isinstance(error, DBAPIError):
            print(f"legato: error: {_describe(error)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
