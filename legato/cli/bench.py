"""``legato bench``: the benchmark harness (scenarios live in the repository's ``bench/``).

The scenarios, the bench workflows and the peers' equivalents are not part of the
installed package: ``legato bench`` runs from a checkout (``make bench``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from legato.cli import command, concurrency

SCENARIO_NAMES = (
    "start",
    "e2e-1",
    "e2e-3",
    "wake",
    "latency",
    "commits",
    "history",
    "claims",
    "metrics",
    "signal",
    "clients",
    "held-snapshot",
    "worker-cpu",
)
#: What a bare ``legato bench`` runs (the others are slower or specific to one feature).
DEFAULT_SCENARIOS = ("start", "e2e-1", "e2e-3", "wake", "commits", "history")


def register(commands: Any) -> None:
    parser = command(
        commands,
        "bench",
        "measure starts, end-to-end runs, latency, commits and history on a fresh PostgreSQL",
        _bench,
        description="Run the benchmark scenarios against one PostgreSQL started for the run "
        "(embedded PostgreSQL 18, durable commits) or --database-url; print each figure "
        "with its settings and the machine context.",
        schema=False,
        database_help="a server to use instead of the embedded one (a database per scenario "
        "is created and dropped; without CREATE DATABASE, a schema per scenario)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIO_NAMES,
        help="run only this scenario (repeatable; default: " + ", ".join(DEFAULT_SCENARIOS) + ")",
    )
    parser.add_argument("--size", choices=("tiny", "small", "full"), default="small")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run DBOS and pgqueuer (pip install them), and durablepg when "
        "LEGATO_BENCH_DURABLEPG names its built binary",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="py-spy record every worker/decider process into DIR (raw collapsed stacks)",
    )
    parser.add_argument(
        "--pooler",
        choices=("pgbouncer",),
        help="run the processes' and the client's engines through a PgBouncer in "
        "transaction mode started in front of the server (Debian's pgbouncer); LISTEN "
        "goes direct",
    )
    parser.add_argument(
        "--citus",
        choices=("distributed", "single-node"),
        help="--database-url is a Citus coordinator: each scenario's schema (4 keys) is "
        "distributed over its workers, or kept on the coordinator alone (to compare)",
    )
    parser.add_argument(
        "--concurrency",
        type=concurrency,
        default=64,
        metavar="N",
        help="task slots per worker process (default 64)",
    )

    parser.add_argument(
        "--lived-in",
        action="store_true",
        help="start each scenario's database with 20,000 finished runs and every table "
        "analyzed, its queues empty (the statistics of an installation that has run for "
        "a while; default: a fresh database, no statistics)",
    )
    parser.add_argument(
        "--held-seconds",
        type=_seconds,
        metavar="S",
        help="how long the held-snapshot scenario holds its REPEATABLE READ snapshot "
        "(default: three times its free phase; 600 for the ten-minute figure)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _import_runner() -> Any:
    repo = Path(__file__).resolve().parents[2]
    if (repo / "bench" / "runner.py").exists() and str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    try:
        from bench import runner
    except ImportError as error:
        from legato.errors import ConfigurationError

        raise ConfigurationError(
            f"legato bench runs from a source checkout (bench/ not found: {error})"
        ) from None
    return runner


async def _bench(args: argparse.Namespace) -> int:
    if args.citus is not None and args.database_url is None:
        from legato.errors import ConfigurationError

        raise ConfigurationError(
            f"--citus {args.citus} needs --database-url: the URL of a Citus coordinator's "
            "database (with the citus extension and its workers added)"
        )
    runner = _import_runner()
    names = args.scenario or DEFAULT_SCENARIOS
    chosen = [n for n in SCENARIO_NAMES if n in names]
    result: int = await runner.run(
        runner.BenchArgs(
            scenarios=chosen,
            size=args.size,
            database_url=args.database_url,
            json=args.json,
            compare=args.compare,
            profile_dir=args.profile,
            concurrency=args.concurrency,
            pooler=args.pooler,
            held_seconds=args.held_seconds,
            citus=args.citus,
            lived_in=args.lived_in,
        )
    )
    return result
