"""``legato db ...`` and ``legato partitions ...``."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    """Register the command group (filled in by the foundation work)."""
    _ = argparse
