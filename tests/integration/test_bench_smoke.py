"""Every Legato bench scenario runs at tiny size and reports figures (never a speed)."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from bench.harness import Server, probe_engine
from bench.lived_in import LIVED_IN_RUNS
from bench.runner import ALL_SCENARIOS
from bench.scenarios import SCENARIOS, SIZES, Options, scenario_commits
from legato.cli.bench import SCENARIO_NAMES
from legato.db.urls import resolve_url
from legato.testing.database import pgbouncer_binary

pytestmark = pytest.mark.timeout(400)


async def test_every_scenario_completes_and_reports(pg_server_url: str) -> None:
    server = Server(pg_server_url)
    await server.start()
    try:
        opts = Options(size=SIZES["tiny"], cores=2, concurrency=16, held_seconds=1.0)
        assert sorted(ALL_SCENARIOS) == sorted(SCENARIO_NAMES)  # each one is runnable
        for name, scenario in ALL_SCENARIOS.items():
            figures = await scenario(server, opts)
            assert figures, name
            for figure in figures:
                assert math.isfinite(figure.value) and figure.value >= 0, figure
                assert "NOT SUCCEEDED" not in figure.settings, figure
    finally:
        await server.stop()


async def test_real_transactions_are_counted_from_the_embedded_servers_log() -> None:
    server = Server(None)  # the bench's own server: its statement log is readable
    await server.start()
    try:
        figures = await scenario_commits(server, Options(size=SIZES["tiny"], cores=2))
    finally:
        await server.stop()
    found = {f.name: f for f in figures}
    draining = found["real transactions per wf, draining"]
    low = found["real transactions per run, low load"]
    assert draining.settings["counted by"] == "statement log"
    # Every write xid is a committed transaction the log must show, so the count from the
    # log is at least the xid count. How far above it lies depends on how long the drain
    # takes (idle polls are read-only transactions): that is the bench's figure to
    # report, not a bound for a test on a loaded machine.
    assert draining.value >= found["write xids per wf, draining"].value > 0, figures
    assert low.value >= found["write xids per run, low load"].value >= 1, figures


@pytest.mark.skipif(pgbouncer_binary() is None, reason="pgbouncer is not installed")
async def test_scenarios_run_through_a_transaction_pooler_with_listen_direct() -> None:
    server = Server(None, pooler=True)
    await server.start()
    try:
        target = await server.fresh("pooled")
        opts = Options(size=SIZES["tiny"], cores=2, concurrency=16)
        figures = [f for name in ("e2e-1", "wake") for f in await SCENARIOS[name](server, opts)]
    finally:
        await server.stop()
    assert target.pooler == "transaction"
    assert target.listen_url is not None
    assert resolve_url(target.listen_url).database == resolve_url(target.url).database
    assert target.url != target.listen_url
    assert figures
    for figure in figures:
        assert math.isfinite(figure.value) and figure.value >= 0, figure
        assert "NOT SUCCEEDED" not in figure.settings, figure


async def test_a_lived_in_database_has_a_history_and_statistics(pg_server_url: str) -> None:
    """``--lived-in``: each scenario's database starts with the finished runs and every
    table analyzed (queues empty), and the scenarios run on it."""
    server = Server(pg_server_url, lived_in=True)
    await server.start()
    try:
        target = await server.fresh("lived-in")
        probe = probe_engine(target)
        try:
            async with probe.connect() as conn:
                finished = (
                    await conn.execute(text(f"SELECT count(*) FROM {target.schema}.runs"))
                ).scalar_one()
                analyzed: dict[str, float] = dict(
                    (
                        await conn.execute(
                            text(
                                "SELECT relname, reltuples FROM pg_class WHERE relnamespace ="
                                " CAST(:s AS regnamespace) AND relname IN"
                                " ('decide_queue', 'task_queue', 'runs', 'tasks')"
                            ),
                            {"s": target.schema},
                        )
                    ).all()
                )
        finally:
            await probe.dispose()
        opts = Options(size=SIZES["tiny"], cores=2, concurrency=16)
        figures = await SCENARIOS["e2e-1"](server, opts)
    finally:
        await server.stop()
    assert finished == LIVED_IN_RUNS
    # A never-analyzed table reads -1; an analyzed one its row count (partitioned parents
    # count their partitions' rows).
    assert analyzed == {
        "decide_queue": 0,
        "task_queue": 0,
        "runs": LIVED_IN_RUNS,
        "tasks": LIVED_IN_RUNS,
    }, analyzed
    for figure in figures:
        assert math.isfinite(figure.value) and figure.value > 0, figure
        assert "NOT SUCCEEDED" not in figure.settings, figure
