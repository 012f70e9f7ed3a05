"""The pure decider: ``decide(spec, snapshot, now) -> list[Action]``.

No I/O, no clock, no randomness: the same spec, snapshot and ``now`` always give
the same actions, and deciding again after applying them gives nothing new. A
``Decision`` (``decision.py``) drives the run; each node kind's part is its handler in
``nodes.py``.
"""

from __future__ import annotations

from datetime import datetime

from legato.engine.decider.decision import Decision
from legato.engine.decider.model import Action, RunSnapshot
from legato.engine.decider.nodes import HANDLERS
from legato.engine.decider.state import DeciderError, UnknownNodeError
from legato.flow.spec import WorkflowSpec

# The package and tests import these from here too.
__all__ = ["HANDLERS", "DeciderError", "UnknownNodeError", "decide"]


def decide(spec: WorkflowSpec, snapshot: RunSnapshot, now: datetime) -> list[Action]:
    """Decide what happens next in one run. Pure: see the module docstring."""
    return Decision(spec, snapshot, now, HANDLERS).run()
