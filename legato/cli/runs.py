"""``legato runs list | show | watch | start | signal | emit``: thin wrappers around
:class:`legato.Client`, which checks the database before each; ``cancel``, ``rerun``
and ``resume``, by id or by filter, are in ``runs_bulk.py``."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from typing import Any

from pydantic import JsonValue

from legato.cli import (
    add_poll,
    command,
    connected,
    group,
    nonempty,
    number_in,
    render,
    runs_bulk,
    runs_stream,
    seconds,
    shown,
)
from legato.cli.apps import add_app, load_app
from legato.cli.run_filters import (
    add_filters,
    as_list_arguments,
    chosen_filter,
    filter_mistake,
    given_filters,
    parse_run_id,
    run_id_arg,
    seconds_shown,
    usage_mistake,
)
from legato.errors import (
    ConfigurationError,
    InvalidInput,
    LegatoError,
    PayloadTooLarge,
)
from legato.flow import InputValidationError
from legato.limits import parse_json_text
from legato.schema import RunStatus

MAX_LIMIT = 1000  # Client.list_runs' page size limit
_limit = number_in(int, 1, MAX_LIMIT, f"a number of runs (1 to {MAX_LIMIT})")


MAX_STDIN_BYTES = 16 << 20


def parse_json(value: str | None, option: str) -> JsonValue:
    """``--input`` / ``--payload`` as JSON (``@-``: stdin): at most ``MAX_JSON_DEPTH`` levels
    deep, no NaN or Infinity (PostgreSQL's jsonb has neither). Any other ``@...`` (no
    JSON text starts with ``@``) is refused as the file name it looks like: only stdin is
    read, so the message says how to redirect the file there."""
    if value is None:
        return None
    if value.startswith("@") and value != "@-":
        path = value[1:]
        named = path if path and path.isprintable() and len(path) <= 200 else "FILE"
        raise InvalidInput(
            f"{option} {shown(value)}: only {option} @- (read stdin) is supported, not a "
            f"file name after @: pass the file on stdin, {option} @- < {shlex.quote(named)}"
        )
    if value == "@-":
        data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
        if len(data) > MAX_STDIN_BYTES:
            raise PayloadTooLarge(f"{option} @-: stdin holds more than {MAX_STDIN_BYTES:,} bytes")
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInput(f"{option} @-: stdin is not UTF-8 text: {error}") from None
    return parse_json_text(value, option, shown(value))


async def _runs_list(args: argparse.Namespace) -> int:
    mistake = filter_mistake(args)
    if args.quarantined:
        others = given_filters(args) + (["--before"] if args.before is not None else [])
        if others:
            mistake = (
                f"--quarantined lists every quarantined run and takes no filters (got "
                f"{', '.join(others)}): drop them, or drop --quarantined to filter runs"
            )
    if mistake is not None:
        return usage_mistake("runs list", mistake)
    if args.quarantined:
        return await _runs_quarantined(args)
    async with connected(args) as client:
        page = await client.list_runs(
            **as_list_arguments(chosen_filter(args)), before=args.before, limit=args.limit
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
    async with connected(args) as client:
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


async def _runs_show(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with connected(args) as client:
        details = await client.get_run(run_id)
    for line in render.run_summary(details.run):
        print(line)
    if details.rerun_of is not None:
        print(f"rerun of  {details.rerun_of}")
    for later in details.reruns:
        print(f"rerun as  {later}")
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
    async with connected(args, poll_interval=args.poll_interval) as client:
        run = (await client.get_run(run_id)).run  # RunNotFound before anything else
        print(f"watching run {run_id} ({run.workflow_name} v{run.workflow_version})", flush=True)
        try:
            async with asyncio.timeout(args.timeout):
                async for event in client.follow(run_id):
                    print(render.history_line(event, run.created_at), flush=True)
        except TimeoutError:
            print(
                f"legato: error: run {run_id} is still running after {args.timeout}s: "
                "follow it again with a longer --timeout (or none, to follow it until it "
                "finishes)",
                file=sys.stderr,
            )
            return 2
        run = (await client.get_run(run_id)).run
    print(f"run {run_id} {run.status.value}")
    return 0 if run.status is RunStatus.SUCCEEDED else 1


async def _runs_start(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.wait:
        return usage_mistake(
            "runs start",
            f"--timeout {seconds_shown(args.timeout)} bounds --wait, and nothing waits "
            "without it: add --wait to wait for the run's output, or drop --timeout",
        )
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
    async with connected(args) as client:
        handle = await client.start(
            args.workflow,
            payload,
            idempotency_key=args.idempotency_key,
            shard_key=args.shard_key,
        )
        print(handle.run_id, flush=True)
        if args.wait:
            try:
                output = await handle.result(timeout=args.timeout)
            except TimeoutError:
                raise LegatoError(
                    f"run {handle.run_id} is still running after {args.timeout}s: "
                    f"follow it with `legato runs watch {handle.run_id}`"
                ) from None
            print(json.dumps(output))
    return 0


async def _runs_signal(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    payload = parse_json(args.payload, "--payload")
    app = load_app(args.app) if args.app else None
    async with connected(args, app) as client:
        await client.signal(run_id, args.name, payload)
    print(f"sent {args.name!r} to run {run_id}")
    return 0


async def _runs_emit(args: argparse.Namespace) -> int:
    payload = parse_json(args.payload, "--payload")
    app = load_app(args.app) if args.app else None
    async with connected(args, app) as client:
        delivered = await client.emit(args.name, payload)
    if not delivered:
        print(f"no run is waiting for {args.name!r}")
    for run_id in delivered:
        print(f"sent {args.name!r} to run {run_id}")
    return 0


def register(commands: Any) -> None:
    """Register the ``legato runs`` group on the root parser."""
    subcommands = group(
        commands,
        "runs",
        "list, inspect, watch, stream, start, signal, cancel, rerun and resume runs",
        description="Inspect and drive runs.",
        epilog="""examples:
  legato runs list --status running
  RUN=$(legato runs start signup --input '{"email": "ada@example.com"}')
  legato runs signal "$RUN" signup.confirmed --payload '{"code": "c0de"}'
  legato runs watch "$RUN"
  legato runs stream "$RUN"
  legato runs show "$RUN"
  legato runs cancel "$RUN"
  legato runs rerun "$RUN" --from charge
  legato runs rerun --workflow signup --status failed --dry-run

`legato runs COMMAND --help` describes each command.""",
    )

    listing = command(
        subcommands,
        "list",
        "runs, newest first",
        _runs_list,
        """examples:
  legato runs list
  legato runs list --workflow signup --status running
  legato runs list --workflow orders --status failed --node charge --error-type ValueError
  legato runs list --created-after 2026-12-01T00:00:00+00:00 --workflow-version 3
  legato runs list --limit 20 --before 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f""",
    )
    add_filters(listing)
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
        help="list runs parked after too many failed decisions instead, with their last "
        "error (every one, up to --limit: no filters, no --before)",
    )
    listing.add_argument(
        "--before",
        type=run_id_arg,
        metavar="RUN_ID",
        help="runs older than this one (the next page)",
    )

    show = command(
        subcommands,
        "show",
        "a run: its status, attempts and history",
        _runs_show,
        """examples:
  legato runs show 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f""",
    )
    show.add_argument("run_id", metavar="RUN_ID")

    watch = command(
        subcommands,
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
        "--timeout", type=seconds, metavar="S", help="give up after S seconds (default: never)"
    )
    add_poll(watch)
    runs_stream.register(subcommands)

    start = command(
        subcommands,
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
        "--input",
        metavar="JSON",
        help="the run's input as JSON (default: null); @- reads stdin (a file: --input @- < FILE)",
    )
    start.add_argument(
        "--idempotency-key", type=nonempty, metavar="KEY", help="start at most one run per key"
    )
    start.add_argument(
        "--shard-key",
        type=nonempty,
        metavar="KEY",
        help="put the run in this key's shard key (a tenant); runs of one key stay together",
    )
    add_app(start, required=False, what="; validates the input")
    start.add_argument("--wait", action="store_true", help="wait for the run and print its output")
    start.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="with --wait: give up after S seconds (without --wait it is refused)",
    )

    signal = command(
        subcommands,
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
    add_app(signal, required=False, what="; validates the payload")

    emit = command(
        subcommands,
        "emit",
        "send an event to every run currently waiting for it",
        _runs_emit,
        """examples:
  legato runs emit signup.confirmed --payload '{"code": "c0de"}'""",
    )
    emit.add_argument("name", type=nonempty, metavar="NAME", help="the event name")
    emit.add_argument("--payload", metavar="JSON", help="the event's payload (default: null)")
    add_app(emit, required=False, what="; validates the payload")

    runs_bulk.register(subcommands)
