"""The ``legato`` command line.

Each command group lives in its own module and registers its subcommands on the
root parser; every command takes the common options (:func:`add_common_options`).
Nothing a user types prints a traceback: a usage mistake is one ``legato: error:``
line and status 2, an error Legato raises on purpose (or an unreachable database)
one line and status 1, and anything unexpected one line and status 1 with a hint to
rerun with ``--log-level DEBUG``, which prints the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import traceback
from collections.abc import Callable, Coroutine, Sequence
from importlib import metadata
from typing import Any, NoReturn, TypeVar

from legato.errors import LegatoError

N = TypeVar("N", int, float)

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# An error line quotes the bad value; a 100 kB argument must not become a 100 kB line.
SHOWN_CHARS = 60
MAX_ERROR_CHARS = 400
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def shown(value: str) -> str:
    """``repr(value)``, cut short (with the full length) when it is long."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… [{len(value):,} characters]"


def error_line(message: str, hint: str = "") -> str:
    """The one ``legato: error: ...`` line for ``message`` (multi-line messages, such as
    pydantic's validation errors, folded; bounded in length) followed by ``hint``."""
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith("For further information")]
    text = "; ".join(kept) or "(no message)"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return f"legato: error: {text}{hint}"


def _report(message: str, hint: str = "") -> None:
    print(error_line(message, hint), file=sys.stderr)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``legato: error:`` line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, error_line(message, f" (see `{self.prog} --help`)") + "\n")


def nonempty(value: str) -> str:
    """An argparse ``type=`` for names, URLs and paths: an empty one is a mistake, not a
    request for the default."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def add_common_options(
    parser: argparse.ArgumentParser,
    *,
    log_level: str = "WARNING",
    schema: bool = True,
    database_help: str = "PostgreSQL URL, e.g. postgresql://user:pass@host/db or "
    "postgresql://user@/db?host=/run/postgresql (default: $LEGATO_DATABASE_URL)",
) -> None:
    """``--database-url``, ``--schema`` (unless the command has none), ``--log-level`` and
    ``--log-format``: what every command takes."""
    parser.add_argument("--database-url", type=nonempty, metavar="URL", help=database_help)
    if schema:
        parser.add_argument(
            "--schema",
            type=nonempty,
            help="PostgreSQL schema holding Legato's tables (default: $LEGATO_SCHEMA or legato)",
        )
    parser.add_argument(
        "--log-level",
        default=log_level,
        choices=LOG_LEVELS,
        type=str.upper,
        help=f"log verbosity (default: {log_level}); DEBUG also prints tracebacks",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get("LEGATO_LOG_FORMAT", "text"),
        choices=["text", "json"],
        help="log lines as text or as one JSON object each (default: $LEGATO_LOG_FORMAT or text)",
    )


def _version() -> str:
    try:
        return metadata.version("legato")
    except metadata.PackageNotFoundError:  # imported from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from legato.cli import bench as bench_commands
    from legato.cli import db as db_commands
    from legato.cli import outbox as outbox_commands
    from legato.cli import runtime as runtime_commands
    from legato.cli import schedules as schedule_commands
    from legato.cli import stats as stats_commands
    from legato.cli import ui as ui_commands

    parser = ArgumentParser(prog="legato", description="Legato: durable workflows on PostgreSQL.")
    parser.add_argument("--version", action="version", version=f"legato {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    db_commands.register(commands)
    runtime_commands.register(commands)
    bench_commands.register(commands)
    stats_commands.register(commands)
    ui_commands.register(commands)
    schedule_commands.register(commands)
    outbox_commands.register(commands)
    return parser


def number_in(
    parse: Callable[[str], N], low: N, high: N, what: str, *, above_low: bool = False
) -> Callable[[str], N]:
    """An argparse ``type=`` accepting finite numbers from ``low`` (exclusive with
    ``above_low``) to ``high``; the error names ``what`` and the value."""

    def convert(value: str) -> N:
        try:
            number: N | None = parse(value)
        except (ValueError, OverflowError):
            number = None
        if (
            number is None
            or not math.isfinite(number)
            or number > high
            or (number <= low if above_low else number < low)
        ):
            raise argparse.ArgumentTypeError(f"not {what}: {shown(value)}")
        return number

    return convert


MAX_CONCURRENCY = 10_000
concurrency = number_in(int, 1, MAX_CONCURRENCY, f"a number of task slots (1 to {MAX_CONCURRENCY})")


def bad_argument(arguments: Sequence[str]) -> str | None:
    """Why one of ``arguments`` can never be right, or None: a NUL byte (PostgreSQL text
    cannot hold one) or bytes that are not UTF-8 (decoded by Python as surrogates)."""
    for argument in arguments:
        if "\x00" in argument:
            return f"argument {shown(argument)} contains a NUL byte"
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {shown(argument)} is not valid UTF-8"
    return None


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (a TaskGroup wraps what its task raised)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe(error: BaseException) -> tuple[str, bool]:
    """The message for ``error`` and whether it was expected (a LegatoError, an
    unreachable or refusing database) rather than a bug."""
    if isinstance(error, LegatoError):
        return str(error), True
    if isinstance(error, TimeoutError):  # an OSError, but not a connection problem
        return f"timed out: {error}", True
    if isinstance(error, OSError):
        return f"cannot reach the database: {error}", True
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, DBAPIError):
        return f"database error: {error.orig}".splitlines()[0], True
    return f"{type(error).__name__}: {error}", False


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    problem = bad_argument(arguments)
    if problem is not None:
        _report(problem)
        return EXIT_USAGE
    try:
        args = build_parser().parse_args(arguments)
    except SystemExit as done:  # --help, --version, or a usage error already printed
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    from legato.cli.runtime import configure_logging

    handler: Handler = args.handler
    try:
        configure_logging(args.log_level, args.log_format)
        return asyncio.run(handler(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as raised:
        message, expected = _describe(_innermost(raised))
        hint = ""
        if args.log_level == "DEBUG":
            traceback.print_exception(raised)
        elif not expected:
            hint = " (rerun with --log-level DEBUG for the traceback)"
        _report(message, hint)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
