"""The held-key views the worker, lease sweeper and relay are built with.

A loop is given the keys it takes from (``HeldShards``, ``legato.engine.loops.held``),
or the installation's ``Shards`` to take from every key. A ``Runtime`` builds its loops
before it has read the key count (``check_database``, in ``start``), so it hands them an
:class:`InstallationShards` it fills in once the count is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from legato.engine.loops.held import AllShards, HeldShards
from legato.errors import ConfigurationError
from legato.schema import Shards


def held_shards(shards: Shards | None, held: HeldShards | None) -> HeldShards:
    """``held``, or every key of ``shards``; ``ConfigurationError`` when neither is given."""
    if held is not None:
        return held
    if shards is None:
        raise ConfigurationError(
            "a loop needs the installation's shard keys: pass shards= (legato.db."
            "check_database returns them) or held= (the keys it holds)"
        )
    return AllShards(shards)


class InstallationShards:
    """Every key of the installation (``AllShards``) once :meth:`know` was told them;
    none before (a loop holding no key takes nothing)."""

    def __init__(self) -> None:
        self._all: AllShards | None = None

    def know(self, shards: Shards) -> None:
        self._all = AllShards(shards)

    def held(self) -> Sequence[int]:
        return () if self._all is None else self._all.held()
