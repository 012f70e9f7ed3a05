"""A Legato process for the multi-process tests: ``python -m tests.e2e.procs ROLE ...``.

Roles: ``decider``, ``decider+timer``, ``worker``, ``all``. ``--pause-decision MARKER``
makes the decider hang inside its first decision's transaction (after applying it,
before commit) and write MARKER, so a test can kill it mid-decision.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
from datetime import timedelta
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from legato import App, Runtime
from legato.db import create_engine
from legato.engine.loops import decision_batch
from legato.runtime import Roles
from tests.helpers import write_whole

ROLES = {
    "decider": Roles(worker=False, timer=False),
    "decider+timer": Roles(worker=False),
    "worker": Roles(decider=False, timer=False),
    "all": Roles(),
}


def pause_decisions(marker: Path) -> None:
    original = decision_batch.Batch.write

    async def write_then_hang(self: decision_batch.Batch, conn: AsyncConnection) -> None:
        await original(self, conn)
        runs = sorted({str(row.run_id) for row in self.creates})
        await asyncio.to_thread(write_whole, marker, ",".join(runs))
        await asyncio.sleep(3600)

    decision_batch.Batch.write = write_then_hang  # type: ignore[method-assign]


async def serve(
    app: App,
    roles: Roles,
    database_url: str,
    concurrency: int,
    lease: float,
    shard_lease: float = 2.0,
) -> None:
    """Run ``app``'s ``roles`` until SIGTERM/SIGINT, polling fast so tests wait little
    (shared with ``tests.e2e.txprocs``)."""
    # LEGATO_SCHEMA: the Citus kill test's processes serve its schema on the cluster.
    engine = create_engine(database_url, os.environ.get("LEGATO_SCHEMA", "legato"))
    runtime = Runtime(
        engine,
        app,
        roles=roles,
        concurrency=concurrency,
        lease=timedelta(seconds=lease),
        shard_lease=timedelta(seconds=shard_lease),
        poll_interval=0.2,
        grace_period=2.0,
    )
    try:
        await runtime.run_until_signalled()
    finally:
        await engine.dispose()


async def main(args: argparse.Namespace) -> None:
    if args.pause_decision:
        pause_decisions(Path(args.pause_decision))
    app = importlib.import_module(args.app).app
    await serve(
        app, ROLES[args.role], args.database_url, args.concurrency, args.lease, args.shard_lease
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--shard-lease", type=float, default=2.0)
    parser.add_argument("--pause-decision")
    parser.add_argument("--app", default="tests.e2e.flows", help="module whose `app` to serve")
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parser.parse_args()))
