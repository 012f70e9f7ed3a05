"""``legato schedules list | pause | resume | trigger``: the deployed schedules.

Schedules are declared in code (``Workflow.schedule``) and deployed with their
workflow; these commands only read them and write pause/resume/trigger through
``legato.engine.loops.schedules``.
"""

from __future__ import annotations

import argparse
from typing import Any

from legato.cli import command, connected, group, nonempty
from legato.cli.render import table
from legato.engine.loops import schedules as scheduling
from legato.engine.repositories.schedules import StoredSchedule


def _when(stored: StoredSchedule) -> str:
    return "-" if stored.paused else stored.next_fire_at.isoformat(timespec="seconds")


def schedules_table(found: list[StoredSchedule]) -> list[str]:
    """One line per schedule: what it starts, when, how it catches up, its state."""
    rows = [
        [
            s.schedule.name,
            s.schedule.workflow,
            s.schedule.timing.describe(),
            s.schedule.policy.catch_up.value.lower(),
            "paused" if s.paused else "active",
            _when(s),
            "-" if s.last_tick_at is None else s.last_tick_at.isoformat(timespec="seconds"),
        ]
        for s in found
    ]
    header = ["NAME", "WORKFLOW", "WHEN", "CATCH-UP", "STATE", "NEXT FIRE (UTC)", "LAST TICK"]
    return table(header, rows)


async def _list(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        found = await scheduling.list_schedules(client.engine)
    if not found:
        print("no schedules deployed")
    for line in schedules_table(found):
        print(line)
    return 0


async def _pause(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        paused = await scheduling.pause(client.engine, args.name)
    if paused:
        print(f"schedule {args.name} paused")
    else:
        print(f"schedule {args.name} is already paused: nothing changed")
    return 0


async def _resume(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        following = await scheduling.resume(client.engine, args.name)
    if following is None:
        print(
            f"schedule {args.name} is not paused: nothing changed "
            "(`legato schedules list` shows its next fire)"
        )
    else:
        print(f"schedule {args.name} resumed; next fire {following.isoformat(timespec='seconds')}")
    return 0


async def _trigger(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        run_id = await scheduling.trigger(client.engine, args.name)
    print(run_id)
    return 0


def register(commands: Any) -> None:
    """Register the ``schedules`` group on the root parser."""
    subcommands = group(
        commands,
        "schedules",
        "list, pause, resume and trigger deployed schedules",
        description="Inspect and drive the schedules deployed with their workflows.",
        epilog="""examples:
  legato schedules list
  legato schedules pause nightly-report
  legato schedules resume nightly-report
  RUN=$(legato schedules trigger nightly-report)""",
    )
    commands_ = [
        ("list", "every deployed schedule and its next fire", _list),
        (
            "pause",
            "stop firing a schedule (its ticks while paused never fire); an already "
            "paused one is left as it is",
            _pause,
        ),
        (
            "resume",
            "fire a paused schedule again, from its next tick; one that is not paused is "
            "left as it is",
            _resume,
        ),
        ("trigger", "start one run of a schedule now; prints the run id", _trigger),
    ]
    for name, help_text, handler in commands_:
        parser = command(subcommands, name, help_text, handler)
        if name != "list":
            parser.add_argument("name", type=nonempty, metavar="NAME", help="the schedule's name")
