"""``legato bench``: run the scenarios against one PostgreSQL and print every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import CITUS_KEYS, Figure, Server, machine_context, to_json
from bench.held_snapshot import scenario_held_snapshot
from bench.lived_in import LIVED_IN_RUNS
from bench.many_clients import scenario_clients
from bench.scenarios import SCENARIOS, SIZES, Options, default_cores
from bench.signal_call import scenario_signal
from bench.worker_cpu import scenario_worker_cpu
from legato.db import create_engine

REPO = Path(__file__).resolve().parent.parent
PEERS = ("dbos", "pgqueuer", "durablepg")
#: Every scenario by name: Legato's own, and those of the latency issue's table.
ALL_SCENARIOS = {
    **SCENARIOS,
    "signal": scenario_signal,
    "clients": scenario_clients,
    "held-snapshot": scenario_held_snapshot,
    "worker-cpu": scenario_worker_cpu,
}


@dataclass(frozen=True)
class BenchArgs:
    scenarios: Sequence[str]
    size: str
    database_url: str | None
    json: bool
    compare: bool
    profile_dir: Path | None
    concurrency: int
    #: "pgbouncer": every engine through a PgBouncer in transaction mode, LISTEN direct.
    pooler: str | None = None
    #: How long the held-snapshot scenario holds its snapshot (None: its default).
    held_seconds: float | None = None
    #: On a Citus coordinator: "distributed" or "single-node" schemas (harness.Server).
    citus: str | None = None
    #: Each scenario's database lived-in (bench.lived_in), not fresh.
    lived_in: bool = False


@dataclass
class PeerResult:
    name: str
    figures: list[Figure]
    error: str | None


async def run(args: BenchArgs) -> int:
    size = SIZES[args.size]
    opts = Options(
        size=size,
        cores=default_cores(),
        profile_dir=args.profile_dir,
        concurrency=args.concurrency,
        held_seconds=args.held_seconds,
    )
    server = Server(
        args.database_url,
        pooler=args.pooler == "pgbouncer",
        citus=args.citus,
        lived_in=args.lived_in,
    )
    figures: list[Figure] = []
    peers: list[PeerResult] = []
    started = time.perf_counter()
    say = _printer(args.json)
    await server.start()
    try:
        engine = create_engine(server.admin_url)
        try:
            context = await machine_context(engine)
        finally:
            await engine.dispose()
        say("machine: " + ", ".join(f"{k}={v}" for k, v in context.items()))
        say(f"size: {args.size}")
        if args.citus:
            say(f"citus: {args.citus} schemas of {CITUS_KEYS} keys on the coordinator")
        if args.lived_in:
            say(f"databases: lived-in ({LIVED_IN_RUNS:,} finished runs, every table analyzed)")
        if args.pooler:
            say(f"pooler: {args.pooler} (pool_mode = transaction), LISTEN direct to the server")
        for name in args.scenarios:
            t0 = time.perf_counter()
            found = await ALL_SCENARIOS[name](server, opts)
            figures += found
            for figure in found:
                say(figure.line())
            say(f"   ({name}: {time.perf_counter() - t0:.1f}s)")
        if args.compare:
            for peer in PEERS:
                url = await server.empty_database(peer)
                log = server.local.log_file if server.local is not None else None
                result = run_peer(peer, url, args.size, server_log=log)
                peers.append(result)
                if result.error:
                    say(f"{peer}: cannot run here: {result.error}")
                for figure in result.figures:
                    say(f"[{peer}] " + figure.line())
            say("")
            for line in comparison_table(figures, peers):
                say(line)
    finally:
        await server.stop()
    total = time.perf_counter() - started
    say(f"total: {total:.0f}s")
    if args.json:
        print(
            to_json(
                context,
                figures,
                {
                    "size": args.size,
                    "pooler": args.pooler,
                    "lived_in": args.lived_in,
                    "seconds": round(total, 1),
                    "peers": {
                        p.name: {"error": p.error, "figures": [vars(f) for f in p.figures]}
                        for p in peers
                    },
                },
            )
        )
    return 0


def _printer(quiet: bool) -> Any:
    def say(line: str) -> None:
        print(line, file=sys.stderr if quiet else sys.stdout, flush=True)

    return say


def run_peer(
    peer: str, url: str, size: str, *, server_log: Path | None = None, timeout: float = 900.0
) -> PeerResult:
    """Run ``bench/peers/<peer>_bench.py`` in its own process; its last stdout line is JSON.
    ``server_log`` (the embedded server's) lets it count real transactions."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                f"bench.peers.{peer}_bench",
                "--url",
                url,
                "--size",
                size,
                *(["--server-log", str(server_log)] if server_log is not None else []),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return PeerResult(peer, [], f"did not finish within {timeout:.0f}s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return PeerResult(peer, [], f"exit {done.returncode}: " + " | ".join(tail))
    data = json.loads(lines[-1])
    return PeerResult(peer, [Figure(**f) for f in data.get("figures", [])], data.get("error"))


#: The comparison rows: (row label, Legato (scenario, name), peer (scenario, name)).
ROWS: list[tuple[str, tuple[str, str], tuple[str, str]]] = [
    ("start, one at a time (runs/s)", ("start", "one at a time"), ("start", "one at a time")),
    ("  / bare INSERT commit rate (x)", ("start", "one at a time / bare commit rate"), ("", "")),
    ("start, batched (runs/s)", ("start", "batched (start_many)"), ("start", "batched")),
    ("bare INSERT commit p50 (ms)", ("start", "bare INSERT commit p50"), ("", "")),
    ("Client.signal p50 (ms)", ("signal", "Client.signal p50"), ("", "")),
    (
        "  / bare INSERT commit rate (x)",
        ("signal", "Client.signal rate / bare commit rate"),
        ("", ""),
    ),
    ("starts, 32 clients (runs/s)", ("clients", "starts, 32 clients"), ("", "")),
    (
        "  / bare commits, 32 clients (x)",
        ("clients", "starts / bare commits, 32 clients"),
        ("", ""),
    ),
    (
        "  / bare, 4 processes x 8 (x)",
        ("clients", "starts / bare commits, 4 processes x 8"),
        ("", ""),
    ),
    (
        "drain, snapshot held: last / free (x)",
        ("held", "drain, snapshot held: last batch / free"),
        ("", ""),
    ),
    ("e2e one-task, best layout (wf/s)", ("e2e-1", "*"), ("e2e-1", "*")),
    ("e2e 3-task chain (wf/s)", ("e2e-3", "3-task chain"), ("e2e-3", "3-task chain")),
    *(
        (f"{what} {p} (ms, lower better)", ("wake", f"{what} {p}"), ("wake", f"{what} {p}"))
        for what in ("signal -> next task", "start -> first task")
        for p in ("p50", "p99")
    ),
    *(
        (
            f"task -> next task p50{where} (ms, lower better)",
            ("wake", f"task -> next task p50{where}"),
            ("", ""),
        )
        for where in ("", ", one process")
    ),
    (
        "bare INSERT commit p50 beside the wake, one process (ms)",
        ("wake", "bare INSERT commit p50, one process"),
        ("", ""),
    ),
    *(
        (
            f"{what} p50 / bare p50{where} (x)",
            ("wake", f"{what} p50 / bare commit p50{where}"),
            ("", ""),
        )
        for what in ("signal -> next task", "start -> first task")
        for where in ("", ", one process")
    ),
    *(
        (
            f"bare INSERT commit p50, spaced{where} (ms)",
            ("wake", f"bare INSERT commit p50, spaced as the samples{where}"),
            ("", ""),
        )
        for where in ("", ", one process")
    ),
    *(
        (
            f"{what} p50 / spaced bare p50{where} (x)",
            ("wake", f"{what} p50 / spaced bare commit p50{where}"),
            ("", ""),
        )
        for what in ("signal -> next task", "start -> first task")
        for where in ("", ", one process")
    ),
    *(
        (f"{label} (lower better)", ("commits", name), ("commits", name))
        for label, name in (
            ("real xact per wf, draining", "real transactions per wf, draining"),
            ("write xids per wf, draining", "write xids per wf, draining"),
            ("real xact per run, 50 runs/s", "real transactions per run, low load"),
        )
    ),
]


def _pick(figures: Sequence[Figure], scenario: str, name: str) -> float | None:
    found = [f.value for f in figures if f.scenario == scenario and (name == "*" or f.name == name)]
    return max(found) if found else None


def comparison_table(legato: Sequence[Figure], peers: Sequence[PeerResult]) -> list[str]:
    head = f"{'scenario':<38} {'Legato':>9}"
    for peer in peers:
        head += f" {peer.name:>9} {'L/' + peer.name[:6]:>9}"
    lines = [head, "-" * len(head)]
    for label, (ls, ln), (ps, pn) in ROWS:
        mine = _pick(legato, ls, ln)
        row = f"{label:<38} {_cell(mine):>9}"
        for peer in peers:
            theirs = _pick(peer.figures, ps, pn)
            ratio = mine / theirs if mine is not None and theirs else None
            row += f" {_cell(theirs):>9} {_cell(ratio, 'x'):>9}"
        lines.append(row)
    for peer in peers:
        if peer.error:
            lines.append(f"{peer.name}: {peer.error}")
    return lines


def _cell(value: float | None, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}{suffix}"
    return f"{value:.2f}{suffix}"
