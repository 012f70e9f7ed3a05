"""Every Legato bench scenario runs at tiny size and reports figures (never a speed)."""

from __future__ import annotations

import math

import pytest

from bench.harness import Server
from bench.scenarios import SCENARIOS, SIZES, Options

pytestmark = pytest.mark.timeout(120)


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
