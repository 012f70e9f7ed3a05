"""The ``legato`` command line.

Each command group lives in its own module (listed in ``COMMAND_MODULES``) whose
``register(commands)`` adds its subcommands to the root parser, every one through
:func:`command`, so every command takes the common options (:func:`add_common_options`).
Nothing a user types prints a traceback: a usage mistake is one ``legato: error:``
line and status 2, an error Legato raises on purpose (or an unreachable database)
one line and status 1, and anything unexpected one line and status 1 with a hint to
rerun with ``--log-level DEBUG``, which prints the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import math
import os
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from legato.arguments import MAX_CONCURRENCY, MAX_POLL_INTERVAL, MAX_SECONDS
from legato.errors import ConfigurationError, LegatoError

if TYPE_CHECKING:
    from legato.client import Client
    from legato.flow import App

N = TypeVar("N", int, float)

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]

# The command groups, in the order `legato --help` lists them; each has register(commands).
COMMAND_MODULES = (
    "legato.cli.db",
    "legato.cli.processes",
    "legato.cli.apps",
    "legato.cli.runs",
    "legato.cli.bench",
    "legato.cli.stats",
    "legato.cli.schedules",
    "legato.cli.outbox",
    "legato.cli.ui",
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
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
        # The middle goes (a long quoted value, usually): the head names the problem
        # and the tail says what to do.
        budget = MAX_ERROR_CHARS - len(f"… [{len(text):,} characters cut] …")
        head, tail = text[: budget // 2], text[len(text) - (budget - budget // 2) :]
        text = f"{head}… [{len(text) - budget:,} characters cut] …{tail}"
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
    parser = ArgumentParser(prog="legato", description="Legato: durable workflows on PostgreSQL.")
    parser.add_argument("--version", action="version", version=f"legato {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(commands)
    return parser


def command(
    parent: Any,
    name: str,
    help_text: str,
    handler: Handler,
    epilog: str | None = None,
    *,
    description: str | None = None,
    log_level: str = "WARNING",
    schema: bool = True,
    database_help: str | None = None,
) -> argparse.ArgumentParser:
    """Add command ``name`` (running ``handler``) to ``parent`` (the root's or a group's
    subcommands) with the common options; an ``epilog`` (examples) is shown as written."""
    parser: argparse.ArgumentParser = parent.add_parser(
        name,
        help=help_text,
        description=description or help_text,
        epilog=epilog,
        formatter_class=(
            argparse.HelpFormatter if epilog is None else argparse.RawDescriptionHelpFormatter
        ),
    )
    options: dict[str, Any] = {"log_level": log_level, "schema": schema}
    if database_help is not None:
        options["database_help"] = database_help
    add_common_options(parser, **options)
    parser.set_defaults(handler=handler)
    return parser


def group(
    parent: Any,
    name: str,
    help_text: str,
    *,
    description: str | None = None,
    epilog: str | None = None,
) -> Any:
    """Add command group ``name`` (``legato NAME COMMAND``); returns the subcommands to
    add its commands to with :func:`command`."""
    parser = parent.add_parser(
        name,
        help=help_text,
        description=description,
        epilog=epilog,
        formatter_class=(
            argparse.HelpFormatter if epilog is None else argparse.RawDescriptionHelpFormatter
        ),
    )
    return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)


@asynccontextmanager
async def connected(
    args: argparse.Namespace, app: App | None = None, **options: Any
) -> AsyncIterator[Client]:
    """A ``Client`` for the command's ``--database-url`` and ``--schema``, closed after."""
    from legato.client import Client

    connected = await Client.connect(args.database_url, schema=args.schema, app=app, **options)
    try:
        yield connected
    finally:
        await connected.close()


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr: one line per record, as text or as JSON (``--log-format``)."""
    from legato.observability import JsonFormatter

    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
    else:  # only the environment default can be anything else: argparse checks the option
        raise ConfigurationError(f"LEGATO_LOG_FORMAT={log_format!r}: expected text or json")
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    if level.upper() != "DEBUG":  # Alembic narrates every migration at INFO
        logging.getLogger("alembic").setLevel(logging.WARNING)


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


concurrency = number_in(int, 1, MAX_CONCURRENCY, f"a number of task slots (1 to {MAX_CONCURRENCY})")
seconds = number_in(float, 0.0, MAX_SECONDS, "a number of seconds (0 to 31,622,400)")
interval = number_in(
    float, 0.0, MAX_POLL_INTERVAL, "a number of seconds above 0, at most 3600", above_low=True
)


def add_poll(parser: argparse.ArgumentParser) -> None:
    """``--poll-interval``: how long a command waits on NOTIFY before reading anyway."""
    parser.add_argument(
        "--poll-interval",
        type=interval,
        default=1.0,
        metavar="S",
        help="seconds between polls when no NOTIFY arrives (default: 1)",
    )


def add_startup_timeout(parser: argparse.ArgumentParser) -> None:
    """``--startup-timeout``: how long a long-running process retries the database at start."""
    parser.add_argument(
        "--startup-timeout",
        type=seconds,
        default=60.0,
        metavar="S",
        help="at start, seconds to keep retrying an unreachable database before exiting "
        "(default: 60; once running, a process retries forever)",
    )


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
    handler: Handler = args.handler
    from legato.db import process_application_name

    kind = f"legato {next(a for a in arguments if not a.startswith('-'))}"
    try:
        configure_logging(args.log_level, args.log_format)
        with process_application_name(kind):
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
