"""``legato runs rerun`` by id and by filter, ``--dry-run``, and ``runs show``'s links,
against runs failed on a real PostgreSQL."""

from __future__ import annotations

import re

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.schema import Runs
from tests.helpers import count_rows
from tests.integration import rerun_apps as apps
from tests.integration.test_cli_errors import assert_one_error_line, legato_here

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


async def test_rerun_commands(
    engine: AsyncEngine, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, third = map(str, await apps.fail_runs(engine, 3))
    db = ("--database-url", database_url)

    dry = await legato_here(capsys, "runs", "rerun", "--workflow", "orders", "--dry-run", *db)
    assert dry.rc == 0, dry
    assert dry.out.startswith("3 runs match; rerun would act on them (dry run: nothing done)\n")
    assert all(run in dry.out for run in (first, second, third))
    assert await count_rows(engine, Runs, Runs.rerun_of.is_not(None)) == 0

    unknown = await legato_here(
        capsys, "runs", "rerun", first, "--from", "charge", "--version", "original", *db
    )
    assert_one_error_line(unknown, "no node 'charge': its nodes are 'fetch', 'price', 'store'")

    one = await legato_here(capsys, "runs", "rerun", first, "--version", "original", *db)
    assert one.rc == 0, one
    rerun = one.out.strip()
    assert re.fullmatch(UUID, rerun)
    shown = await legato_here(capsys, "runs", "show", first, *db)
    assert f"rerun as  {rerun}" in shown.out
    shown = await legato_here(capsys, "runs", "show", rerun, *db)
    assert f"rerun of  {first}" in shown.out
    assert "rerun_started" in shown.out and "node_reused" in shown.out

    bulk = await legato_here(
        capsys,
        "runs",
        "rerun",
        "--workflow",
        "orders",
        "--status",
        "failed",
        "--node",
        "price",
        "--version",
        "original",
        "--yes",
        *db,
    )
    assert bulk.rc == 0, bulk
    assert bulk.out == "rerun: 3 runs: 2 done, 1 skipped, 0 refused\n"
    assert "rerun [##############################] 3/3" in bulk.err or bulk.err == ""

    # The reruns are running (no runtime here): each refused, named, one error line.
    refused = await legato_here(
        capsys,
        "runs",
        "rerun",
        "--workflow",
        "orders",
        "--created-after",
        "2000-01-01T00:00:00+00:00",
        "--status",
        "running",
        "--yes",
        *db,
    )
    assert refused.rc == 1
    assert refused.err == (
        "legato: error: 3 of 3 runs could not be rerun (the first are listed above)\n"
    )
    assert refused.out.startswith("rerun: 3 runs: 0 done, 0 skipped, 3 refused\n")
    assert refused.out.count("is still running: cancel it") == 3

    # With --app, the new code's task models check the outputs a rerun would reuse.
    text_fetch = "tests.integration.rerun_apps:text_fetch"
    deployed = await legato_here(capsys, "deploy", "--app", text_fetch, *db)
    assert deployed.rc == 0, deployed
    incompatible = await legato_here(
        capsys, "runs", "rerun", first, "--from", "price", "--app", text_fetch, *db
    )
    assert_one_error_line(
        incompatible,
        "on workflow 'orders' version 2 (deployed): node 'fetch' stored an output task "
        "'fetch' no longer accepts",
        "rerun from 'fetch' or an earlier node",
    )
