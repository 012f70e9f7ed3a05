"""Each Legato process kind, started as a user would and put under load, holds no more
server connections (``pg_stat_activity`` by ``application_name``) than
docs/production.md's connection budget states."""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus
from legato.engine.repositories import stats
from legato.schema import Runs
from tests.e2e import flows
from tests.helpers import ROOT, count_rows, eventually, spawn_legato


def documented_budget() -> dict[str, int]:
    """``application_name`` -> connections at most, from docs/production.md's table."""
    page = (ROOT / "docs" / "production.md").read_text()
    section = page[page.index("## Connection budget") :]
    rows = re.findall(r"^\| [^|]+ \| `([^`]+)` \| (\d+) \|", section, re.MULTILINE)
    return {name: int(most) for name, most in rows}


async def test_each_process_kind_stays_within_its_documented_connections(
    engine: AsyncEngine, database_url: str
) -> None:
    budget = documented_budget()
    env = {"LEGATO_DATABASE_URL": database_url}
    app = ("--app", "tests.e2e.flows:app", "--poll-interval", "0.2")
    processes = [
        await spawn_legato("decider", *app, env=env),
        await spawn_legato("worker", *app, "--concurrency", "32", env=env),
    ]
    most: Counter[str] = Counter()
    try:
        async with Client(engine, app=flows.app) as client:
            await client.start_many(flows.fanout, [" ".join("abcdefgh")] * 150)

        async def all_finished() -> bool:
            assert all(p.returncode is None for p in processes), "a process died"
            async with engine.connect() as conn:
                for held in await stats.connections_by_application(conn):
                    most[held.application] = max(most[held.application], held.total)
            succeeded = await count_rows(engine, Runs, Runs.status == RunStatus.SUCCEEDED)
            return succeeded == 150

        await eventually(all_finished, "every run to finish", timeout=120)
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in processes))
    for kind in ("legato worker", "legato decider", "legato"):  # "legato": this process
        assert 1 <= most[kind] <= budget[kind], (kind, most[kind], budget[kind])
