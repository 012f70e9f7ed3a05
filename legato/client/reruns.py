"""The ``Client``'s reruns and bulk actions by filter: thin calls of ``legato.rerun``
and ``legato.bulk``, which do the work."""

from __future__ import annotations

from typing import Any

from legato import bulk
from legato.arguments import RunId, as_run_id
from legato.client.base import schema_explained
from legato.client.reads import RunReads
from legato.errors import InvalidArgument
from legato.handle import RunHandle
from legato.limits import check_name
from legato.models import BulkResult, RunFilter
from legato.rerun import Specs, check_version, rerun


def _node(from_node: str | None) -> str | None:
    return None if from_node is None else check_name("from_node", from_node, InvalidArgument)


class RunReruns(RunReads):
    """Rerunning a run from a node; cancelling, rerunning, resuming runs by filter."""

    @schema_explained
    async def rerun(
        self, run_id: RunId, from_node: str | None = None, version: str = "deployed"
    ) -> RunHandle[Any]:
        """Start a new run of a finished run's workflow, linked to it, that reuses its
        completed outputs for every node ``from_node`` does not lead to and runs
        ``from_node`` and what follows again (without it: from the first failed node);
        on the ``"deployed"`` version (how a fix reaches runs that failed on a bug) or
        the ``"original"`` one. Raises ``RunNotFound``, ``RunStillRunning``,
        ``UnknownNode`` or ``RerunIncompatible`` (naming the node and why)."""
        started = await rerun(
            self.engine,
            await self.shards(),
            Specs(self.app),
            as_run_id(run_id),
            from_node=_node(from_node),
            version=check_version(version),
        )
        assert started is not None  # only a bulk rerun skips a run already rerun
        return RunHandle(self, started.run_id, None)

    @schema_explained
    async def count_runs(self, where: RunFilter | None = None) -> int:
        """How many runs ``where`` chooses (all runs without it). Fan-out across keys."""
        return await bulk.count(self.engine, bulk.checked_filter(where))

    @schema_explained
    async def bulk_cancel(
        self, where: RunFilter, *, progress: bulk.Progress | None = None
    ) -> BulkResult:
        """Ask every running run ``where`` chooses to cancel (``legato.bulk``); safe to
        interrupt and call again. ``progress`` gets the counts after each run."""
        return await bulk.act(
            self.engine,
            await self.shards(),
            bulk.checked_filter(where),
            "cancel",
            progress=progress,
        )

    @schema_explained
    async def bulk_resume(
        self, where: RunFilter, *, progress: bulk.Progress | None = None
    ) -> BulkResult:
        """Resume every quarantined run ``where`` chooses (``legato.bulk``)."""
        return await bulk.act(
            self.engine,
            await self.shards(),
            bulk.checked_filter(where),
            "resume",
            progress=progress,
        )

    @schema_explained
    async def bulk_rerun(
        self,
        where: RunFilter,
        *,
        from_node: str | None = None,
        version: str = "deployed",
        progress: bulk.Progress | None = None,
    ) -> BulkResult:
        """``rerun`` every finished run ``where`` chooses that has no rerun yet
        (``legato.bulk``): calling it again after an interruption reruns no run twice."""
        return await bulk.act(
            self.engine,
            await self.shards(),
            bulk.checked_filter(where),
            "rerun",
            rerun_options=bulk.RerunOptions(_node(from_node), check_version(version)),
            specs=Specs(self.app),
            progress=progress,
        )
