"""The pure decider: ``decide(spec, snapshot, now) -> list[Action]`` (no I/O)."""

from legato.engine.decider.backoff import base_delay, retry_delay, retry_seed
from legato.engine.decider.decide import DeciderError, UnknownNodeError, decide

__all__ = [
    "DeciderError",
    "UnknownNodeError",
    "base_delay",
    "decide",
    "retry_delay",
    "retry_seed",
]
