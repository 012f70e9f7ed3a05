"""Every Legato bench scenario runs at tiny size and reports figures (never a speed)."""

from __future__ import annotations

import math

import pytest

from bench.harness import Server
from bench.scenarios import SCENARIOS, SIZES, Options, scenario_commits

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
    # A one-task run is at least started and finished in transactions of its own at low
    # load, and the drain batches: both are positive and far below one per statement.
    assert 0 < draining.value < 10, draining
    assert 1 <= low.value < 20, low
