"""Every Legato bench scenario runs at tiny size and reports figures (never a speed)."""

from __future__ import annotations

import math

import pytest

from bench.harness import Server
from bench.scenarios import SCENARIOS, SIZES, Options, scenario_commits
from legato.db.urls import resolve_url
from legato.testing.database import pgbouncer_binary

pytestmark = pytest.mark.timeout(400)


async def test_every_scenario_completes_and_reports(pg_server_url: str) -> None:
    server = Server(pg_server_url)
    await server.start()
    try:
        opts = Options(size=SIZES["tiny"], cores=2, concurrency=16)
        for name, scenario in SCENARIOS.items():
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
