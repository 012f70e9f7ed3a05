"""What ``runs list`` and the bulk actions (``runs cancel|rerun|resume``) share: the
run filter options, the ``legato.RunFilter`` they give, reading a run id, and the usage
mistakes found once every option is read (options that contradict each other)."""

from __future__ import annotations

import argparse
import sys
import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Any

from legato.cli import EXIT_USAGE, error_line, nonempty, number_in, shown
from legato.errors import InvalidRunId
from legato.models import RunFilter
from legato.schema import RunStatus

# RunFilter's fields, each read from the option of that name but the version, read from
# --workflow-version: a rerun's --version is the version it runs.
_OPTION = {"version": "workflow_version"}


def parse_run_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidRunId(
            f"not a run id: {shown(value)} (run ids are UUIDs, as printed by `legato runs start`)"
        ) from None


def run_id_arg(value: str) -> uuid.UUID:
    """``parse_run_id`` as an option's type: a usage error."""
    try:
        return parse_run_id(value)
    except InvalidRunId as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_status(value: str) -> RunStatus:
    try:
        return RunStatus(value.upper())
    except ValueError:
        choices = ", ".join(s.value.lower() for s in RunStatus)
        raise argparse.ArgumentTypeError(
            f"unknown status {shown(value)} (one of {choices})"
        ) from None


def parse_moment(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"not a time with a zone: {shown(value)} (ISO 8601, e.g. 2026-12-03T09:00:00+00:00)"
        )
    return moment


def add_filters(parser: argparse.ArgumentParser) -> None:
    """The run filter options, one per ``legato.RunFilter`` field."""
    parser.add_argument(
        "--workflow", type=nonempty, metavar="NAME", help="only runs of this workflow"
    )
    parser.add_argument(
        "--workflow-version",
        type=number_in(int, 1, 2**31 - 1, "a workflow version (1 or more)"),
        metavar="N",
        help="only runs of this version of the workflow",
    )
    parser.add_argument(
        "--status",
        type=parse_status,
        metavar="STATUS",
        help="only runs in this status: running, succeeded, failed, cancelled, timed_out",
    )
    parser.add_argument(
        "--created-after", type=parse_moment, metavar="TIME", help="only runs created from TIME"
    )
    parser.add_argument(
        "--created-before", type=parse_moment, metavar="TIME", help="only runs created before TIME"
    )
    parser.add_argument(
        "--error-type",
        type=nonempty,
        metavar="TYPE",
        help="only runs whose error has this type (e.g. ValueError)",
    )
    parser.add_argument(
        "--node",
        type=nonempty,
        metavar="NODE",
        help="only runs where this node failed or timed out and never completed",
    )


def usage_mistake(command: str, message: str) -> int:
    """Report a usage mistake found after parsing (options that contradict each other)
    as argparse reports one: one ``legato: error:`` line with the ``--help`` hint; the
    exit status, 2. Call it before connecting, so nothing is read or written."""
    print(error_line(message, f" (see `legato {command} --help`)"), file=sys.stderr)
    return EXIT_USAGE


def filter_mistake(args: argparse.Namespace) -> str | None:
    """Why the filter options contradict each other, or None: ``--created-after`` not
    before ``--created-before`` chooses no run (``legato.RunFilter`` refuses it too, with
    its own parameter names)."""
    after, until = args.created_after, args.created_before
    if after is not None and until is not None and after >= until:
        return (
            f"--created-after {after.isoformat()} is not before --created-before "
            f"{until.isoformat()}: no run is created in that range (swap them, or drop one)"
        )
    return None


def given_filters(args: argparse.Namespace) -> list[str]:
    """The filter options given, as their flags (``--workflow``, ``--status``...)."""
    return [
        "--" + _OPTION.get(name, name).replace("_", "-")
        for name in asdict(RunFilter())
        if getattr(args, _OPTION.get(name, name)) is not None
    ]


def seconds_shown(value: float) -> str:
    """A number of seconds as typed: ``5``, not ``5.0``."""
    return str(int(value)) if value.is_integer() else str(value)


def chosen_filter(args: argparse.Namespace) -> RunFilter | None:
    """The filter the options give; None when none is given."""
    given = {name: getattr(args, _OPTION.get(name, name)) for name in asdict(RunFilter())}
    if all(value is None for value in given.values()):
        return None
    return RunFilter(**given)


def as_list_arguments(chosen: RunFilter | None) -> dict[str, Any]:
    """``chosen`` as the keyword arguments of ``Client.list_runs``."""
    return asdict(chosen or RunFilter())
