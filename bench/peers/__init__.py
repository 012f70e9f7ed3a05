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
