"""The pure decider: ``decide(spec, snapshot, now) -> list[Action]`` (no I/O)."""

# ``legato.schema.tables`` imports this package's model, and the model imports
# ``legato.schema.enums``: initialise ``legato.schema`` first so that importing
# either side first works.
import legato.schema  # noqa: F401
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
