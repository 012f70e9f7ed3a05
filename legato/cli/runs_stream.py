"""``legato runs stream RUN``: a run's progress entries (``ctx.progress`` /
``ctx.stream`` in its tasks), one line each, followed live until the run finishes; a
thin wrapper around ``Client.stream``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from legato.arguments import MAX_SEQ
from legato.cli import add_poll, command, connected, number_in, seconds
from legato.cli.run_filters import parse_run_id
from legato.progress import ProgressEntry
from legato.schema import RunStatus


def entry_line(entry: ProgressEntry, as_json: bool) -> str:
    """One entry as a line: ``#seq node[iteration] attempt N: value`` (the value as
    compact JSON, so a chunk with a newline stays on its line), or a JSON object."""
    if as_json:
        return json.dumps(
            {
                "seq": entry.seq,
                "node": entry.node_id,
                "iteration": entry.iteration,
                "attempt": entry.attempt,
                "kind": entry.kind,
                "value": entry.value,
                "at": entry.created_at.isoformat(),
            },
            ensure_ascii=False,
        )
    where = entry.node_id if not entry.iteration else f"{entry.node_id}[{entry.iteration}]"
    value = json.dumps(entry.value, ensure_ascii=False, separators=(",", ":"))
    return f"#{entry.seq} {where} attempt {entry.attempt}: {value}"


async def _runs_stream(args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    async with connected(args, poll_interval=args.poll_interval) as client:
        try:
            async with asyncio.timeout(args.timeout):
                async for entry in client.stream(run_id, after=args.after):
                    print(entry_line(entry, args.json), flush=True)
        except TimeoutError:
            print(
                f"legato: error: run {run_id} is still running after {args.timeout}s: "
                "follow it again with a longer --timeout (--after SEQ skips what was printed)",
                file=sys.stderr,
            )
            return 2
        run = (await client.get_run(run_id)).run
    if not args.json:
        print(f"run {run_id} {run.status.value}")
    return 0 if run.status is RunStatus.SUCCEEDED else 1


def register(subcommands: Any) -> None:
    """Add ``stream`` to the ``legato runs`` group."""
    stream = command(
        subcommands,
        "stream",
        "print a run's progress entries, then follow them live until the run finishes",
        _runs_stream,
        """examples:
  legato runs stream 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f
  legato runs stream 01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f --after 120 --json

Each line is one entry a task reported with ctx.progress(value) or ctx.stream(text):
"#SEQ NODE attempt N: VALUE" (VALUE as JSON), or with --json one JSON object per line.
Resume after a break with --after SEQ (the last seq printed).
Exit status: 0 when the run succeeded, 1 when it failed or was cancelled,
2 on --timeout.""",
    )
    stream.add_argument("run_id", metavar="RUN_ID")
    stream.add_argument(
        "--after",
        type=number_in(int, 0, MAX_SEQ, "a progress seq (a whole number >= 0)"),
        default=0,
        metavar="SEQ",
        help="only entries after this seq (default: 0, every entry)",
    )
    stream.add_argument("--json", action="store_true", help="one JSON object per entry")
    stream.add_argument(
        "--timeout", type=seconds, metavar="S", help="give up after S seconds (default: never)"
    )
    add_poll(stream)
