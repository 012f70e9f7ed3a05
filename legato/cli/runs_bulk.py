"""``legato runs cancel | rerun | resume``: one run by id, or every run a filter
chooses (the filters of ``runs list``), with ``--dry-run``, a confirmation above
``--confirm-above`` runs (``--yes`` skips it) and a progress line on stderr. The work
is ``Client.rerun`` and the bulk actions of ``legato.bulk``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from typing import Any

from legato.cli import command, connected, nonempty, number_in, render, seconds, shown
from legato.cli.apps import add_app, load_app
from legato.cli.run_filters import (
    add_filters,
    as_list_arguments,
    chosen_filter,
    filter_mistake,
    parse_run_id,
    seconds_shown,
    usage_mistake,
)
from legato.errors import InvalidArgument, LegatoError
from legato.flow import App
from legato.limits import check_name
from legato.models import BulkResult, RunFilter
from legato.rerun import VERSIONS

SAMPLE = 10  # runs a --dry-run shows
CONFIRM_ABOVE = 100
WAIT_SECONDS = 60.0  # --wait's default --timeout


def _target(args: argparse.Namespace) -> tuple[uuid.UUID | None, RunFilter | None]:
    chosen = chosen_filter(args)
    if args.run_id is not None and chosen is not None:
        raise LegatoError(
            f"give a run id or filters, not both (got {shown(args.run_id)} and filters)"
        )
    if args.run_id is None and chosen is None:
        raise LegatoError(
            f"runs {args.action}: give a RUN_ID, or filters that choose runs "
            "(e.g. --workflow signup --status failed; see --help)"
        )
    if args.run_id is None:
        return None, chosen
    return parse_run_id(args.run_id), None


def _app(args: argparse.Namespace) -> App | None:
    """A rerun's ``--app``: the new code, whose task models check the reused outputs."""
    path = getattr(args, "app", None)
    return None if path is None else load_app(path)


async def _one(args: argparse.Namespace, run_id: uuid.UUID) -> int:
    async with connected(args, _app(args)) as client:
        if args.action == "rerun":
            handle = await client.rerun(run_id, from_node=args.from_node, version=args.version)
            print(handle.run_id, flush=True)
            return await _wait(args, client, handle.run_id)
        if args.action == "resume":
            if not await client.resume(run_id):
                raise LegatoError(
                    f"run {run_id} is not quarantined: nothing to resume "
                    "(`legato runs list --quarantined` lists the runs that are)"
                )
            print(f"resumed run {run_id}: its decision is due again")
            return 0
        await client.cancel(run_id)
        if args.wait:
            return await _wait(args, client, run_id)
        print(f"cancel requested for run {run_id}")
        return 0


async def _wait(args: argparse.Namespace, client: Any, run_id: uuid.UUID) -> int:
    if not args.wait:
        return 0
    timeout = WAIT_SECONDS if args.timeout is None else args.timeout
    with contextlib.suppress(LegatoError, TimeoutError):
        await client.result(run_id, timeout=timeout)
    run = (await client.get_run(run_id)).run
    print(f"run {run_id} {run.status.value}")
    return 0


async def _bulk(args: argparse.Namespace, chosen: RunFilter) -> int:
    async with connected(args, _app(args)) as client:
        total = await client.count_runs(chosen)
        if total == 0:
            print("no runs match")
            return 0
        if args.dry_run:
            page = await client.list_runs(**as_list_arguments(chosen), limit=SAMPLE)
            print(f"{total} runs match; {args.action} would act on them (dry run: nothing done)")
            for line in render.runs_table(page.runs):
                print(line)
            if total > len(page.runs):
                print(f"(and {total - len(page.runs)} more)")
            return 0
        _confirm(args, total)
        progress = _Progress(args.action, total)
        if args.action == "rerun":
            result = await client.bulk_rerun(
                chosen, from_node=args.from_node, version=args.version, progress=progress
            )
        elif args.action == "resume":
            result = await client.bulk_resume(chosen, progress=progress)
        else:
            result = await client.bulk_cancel(chosen, progress=progress)
        progress.end()
    print(
        f"{args.action}: {result.matched} runs: {result.done} done, "
        f"{result.skipped} skipped, {result.failed} refused"
    )
    for run_id, message in result.errors:
        print(f"  {run_id}: {message}")
    if result.failed:
        raise LegatoError(
            f"{result.failed} of {result.matched} runs could not be {_past(args.action)} "
            "(the first are listed above)"
        )
    return 0


def _past(action: str) -> str:
    return {"cancel": "cancelled", "rerun": "rerun", "resume": "resumed"}[action]


def _confirm(args: argparse.Namespace, total: int) -> None:
    if args.yes or total <= args.confirm_above:
        return
    if not sys.stdin.isatty():
        raise LegatoError(
            f"{total} runs match, more than --confirm-above {args.confirm_above}: pass --yes "
            f"to {args.action} them (--dry-run shows them first)"
        )
    print(f"{args.action} {total} runs? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise LegatoError(f"not confirmed: no run was {_past(args.action)}")


class _Progress:
    """A progress line on stderr: redrawn in place on a terminal, else one line per
    ``STEP`` runs (a log, or a test waiting for it)."""

    STEP = 10

    def __init__(self, action: str, total: int) -> None:
        self.action = action
        self.total = total
        self.tty = sys.stderr.isatty()
        self.last: BulkResult | None = None

    def __call__(self, result: BulkResult) -> None:
        self.last = result
        if self.tty or result.matched % self.STEP == 0:
            width = 30
            filled = min(width, width * result.matched // max(self.total, 1))
            bar = "#" * filled + "." * (width - filled)
            line = (
                f"{self.action} [{bar}] {result.matched}/{self.total} "
                f"(done {result.done}, skipped {result.skipped}, refused {result.failed})"
            )
            print(
                ("\r" + line) if self.tty else line,
                end="" if self.tty else "\n",
                file=sys.stderr,
                flush=True,
            )

    def end(self) -> None:
        if self.tty and self.last is not None:
            print(file=sys.stderr, flush=True)


def _mistake(args: argparse.Namespace) -> str | None:
    """Options that contradict each other, found before anything is read: a reversed
    time range, or a ``--timeout`` with nothing waiting (no ``--wait``)."""
    mistake = filter_mistake(args)
    timeout = getattr(args, "timeout", None)
    if mistake is None and timeout is not None and not args.wait:
        mistake = (
            f"--timeout {seconds_shown(timeout)} bounds --wait, and nothing waits without "
            "it: add --wait (with one RUN_ID) to wait for the run, or drop --timeout"
        )
    return mistake


async def _act(args: argparse.Namespace) -> int:
    mistake = _mistake(args)
    if mistake is not None:
        return usage_mistake(f"runs {args.action}", mistake)
    run_id, chosen = _target(args)
    if getattr(args, "from_node", None) is not None:  # before a dry run shows what it would do
        check_name("--from", args.from_node, InvalidArgument)
    if run_id is not None:
        if args.dry_run:
            raise LegatoError(
                "--dry-run is for filters; with one RUN_ID there is nothing to preview"
            )
        return await _one(args, run_id)
    if getattr(args, "wait", False):
        raise LegatoError(
            "--wait is for one RUN_ID; with filters the command returns when every run "
            "chosen has been acted on (`legato runs list` with the same filters shows them)"
        )
    assert chosen is not None
    return await _bulk(args, chosen)


_BULK_NOTE = """With filters instead of a RUN_ID the action applies to every run they choose
(the filters of `legato runs list`), a run at a time, newest first: --dry-run
prints the count and a sample, more than --confirm-above runs (default 100) asks
first (--yes skips it), and stderr shows the progress. It is safe to interrupt and
run again: a run already acted on is skipped."""


def register(subcommands: Any) -> None:
    """Add ``cancel``, ``rerun`` and ``resume`` to the ``legato runs`` group."""
    cancel = command(
        subcommands,
        "cancel",
        "cancel a running run, or every running run a filter chooses",
        _act,
        f"""examples:
  legato runs cancel 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f --wait
  legato runs cancel --workflow signup --status running --dry-run
  legato runs cancel --workflow signup --created-before 2026-12-01T00:00:00+00:00 --yes

Running tasks are interrupted. {_BULK_NOTE}""",
    )
    rerun = command(
        subcommands,
        "rerun",
        "rerun a finished run from a node, or every run a filter chooses",
        _act,
        f"""examples:
  legato runs rerun 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f
  legato runs rerun 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f --from charge --version original
  legato runs rerun --workflow orders --status failed --node charge --from charge --yes

A rerun is a new run, linked to the original both ways (`legato runs show`), that
reuses the original's completed outputs for every node --from does not lead to and
runs that node and what follows again (default: from the first failed node), on
the deployed version (default) or the original one. Prints the new run's id.
{_BULK_NOTE} A bulk rerun skips a run that already has a rerun.""",
    )
    rerun.add_argument(
        "--from",
        dest="from_node",
        type=nonempty,
        metavar="NODE",
        help="the node to run again, with what follows (default: the first failed node)",
    )
    rerun.add_argument(
        "--version",
        dest="version",
        choices=VERSIONS,
        default="deployed",
        help="run the workflow's deployed version (default) or the original run's",
    )
    add_app(rerun, required=False, what="; the new code: a reused output its task refuses is named")
    resume = command(
        subcommands,
        "resume",
        "make a quarantined run's decision due again, or every one a filter chooses",
        _act,
        f"""examples:
  legato runs list --quarantined
  legato runs resume 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f
  legato runs resume --workflow signup --yes

A run whose decision fails is retried with back-off; after 10 failures in a row
it is quarantined: no decider touches it until it is resumed. {_BULK_NOTE}""",
    )
    for parser, action in ((cancel, "cancel"), (rerun, "rerun"), (resume, "resume")):
        parser.set_defaults(action=action)
        parser.add_argument("run_id", nargs="?", metavar="RUN_ID", help="one run (or filters)")
        add_filters(parser)
        parser.add_argument(
            "--dry-run", action="store_true", help="with filters: print the count and a sample"
        )
        parser.add_argument("--yes", action="store_true", help="with filters: do not ask first")
        parser.add_argument(
            "--confirm-above",
            type=number_in(int, 0, 10**9, "a number of runs"),
            default=CONFIRM_ABOVE,
            metavar="N",
            help=f"with filters: ask before acting on more than N runs (default {CONFIRM_ABOVE})",
        )
        if action != "resume":
            parser.add_argument(
                "--wait", action="store_true", help="with a RUN_ID: wait until the run finishes"
            )
            parser.add_argument(
                "--timeout",
                type=seconds,
                metavar="S",
                help=f"with --wait: give up waiting after S seconds (default: "
                f"{WAIT_SECONDS:.0f}); without --wait it is refused",
            )
