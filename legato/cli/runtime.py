"""``legato decider | worker | timer | dev | deploy | runs ...``."""

from __future__ import annotations

from typing import Any


def register(commands: Any) -> None:
    """Register the command group (filled in by the runtime work)."""
