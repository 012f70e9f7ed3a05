"""The peers' equivalents of Legato's scenarios; each runs as ``python -m bench.peers.X``
and prints one JSON line: ``{"figures": [...]}`` or ``{"error": "..."}``."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(figures: list[dict[str, Any]], error: str | None = None) -> None:
    print(json.dumps({"figures": figures, "error": error}), flush=True)


def figure(scenario: str, name: str, value: float, unit: str, **settings: Any) -> dict[str, Any]:
    return {"scenario": scenario, "name": name, "value": value, "unit": unit, "settings": settings}


def fail(error: BaseException | str) -> None:
    emit([], str(error) if isinstance(error, str) else f"{type(error).__name__}: {error}")
    sys.exit(0)


SIZES = {
    "tiny": {"start": 20, "batched": 200, "e2e": 20, "chain": 10, "wake": 5},
    "small": {"start": 300, "batched": 3000, "e2e": 500, "chain": 200, "wake": 50},
    "full": {"start": 2000, "batched": 30000, "e2e": 3000, "chain": 1000, "wake": 200},
}


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


#: Runs per second of the low-load commits scenario (bench.scenarios.LOW_LOAD_RATE).
#: A drain times a warm fleet (Legato's and every peer's alike): this many runs per
#: process go through it first, so each process has made its connections and
#: statements before the clock starts.
WARM_RUNS_PER_PROCESS = 4
#: How long an idle backend may keep its transaction counts before reporting them
#: (PostgreSQL's PGSTAT_MIN_INTERVAL): waited after the warm-up, so that
#: ``xact_commit`` read before the window holds the warm-up's commits.
STATS_FLUSH_SECONDS = 1.2

LOW_LOAD_RATE = 50
LOW_LOAD_SECONDS = {"tiny": 0.5, "small": 3.0, "full": 5.0}


async def counters(url: str) -> tuple[int, int]:
    """(``xact_commit`` of this database, the cluster's next xid), as bench.scenarios does;
    from a connection named bench.txcount.PROBE_APP so the statement count skips it."""
    import asyncpg

    from bench.txcount import PROBE_APP

    conn = await asyncpg.connect(url, server_settings={"application_name": PROBE_APP})
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await conn.fetchrow(
            "SELECT xact_commit, pg_snapshot_xmax(pg_current_snapshot())::text::bigint "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        assert row is not None
        return int(row[0]), int(row[1])
    finally:
        await conn.close()


async def statement_log(url: str, server_log: str | None, on: bool) -> Any:
    """Log every statement of this database from its next connections on (or stop);
    a bench.txcount.LogWindow over ``server_log`` when on and the log is given."""
    import asyncpg

    from bench.txcount import PROBE_APP, STATEMENT_LOG, LogWindow

    if server_log is None:
        return None
    conn = await asyncpg.connect(url, server_settings={"application_name": PROBE_APP})
    try:
        database = await conn.fetchval("SELECT current_database()")
        action = f"SET log_statement = '{STATEMENT_LOG}'" if on else "RESET log_statement"
        await conn.execute(f'ALTER DATABASE "{database}" {action}')
    finally:
        await conn.close()
    from pathlib import Path

    return LogWindow(Path(server_log), str(database)) if on else None


class Proc:
    """A peer's worker process speaking lines on stdin/stdout: it prints ``ready``, starts
    on ``go``, stops at the end of its stdin and prints its last line (JSON) on exit."""

    def __init__(self, module: str, *args: str) -> None:
        import os
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )

    def wait_for(self, word: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == word:
                return
        raise RuntimeError(f"peer process exited (code {self.proc.wait()}) before '{word}'")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 30.0) -> str:
        """End its stdin; its last stdout line."""
        out, _ = self.proc.communicate(timeout=timeout)
        lines = out.strip().splitlines()
        return lines[-1] if lines else ""


def start_procs(module: str, count: int, *args: str) -> list[Proc]:
    procs = [Proc(module, *args) for _ in range(count)]
    for proc in procs:
        proc.wait_for("ready")
    return procs
