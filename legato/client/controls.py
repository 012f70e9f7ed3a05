"""The ``Client``'s run controls: deploying, signals and events, cancelling, and the
quarantine (listed, resumed)."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import JsonValue

from legato.arguments import RunId, as_run_id, check_limit
from legato.client.base import ClientBase, plain_json, schema_explained
from legato.engine.deploy import deploy_workflows
from legato.engine.repositories import decide_queue, runs, signals, tasks
from legato.errors import InvalidArgument, InvalidInput, RunFinished, RunNotFound, UnknownWorkflow
from legato.flow import App, InputValidationError, UnknownEventError
from legato.limits import check_name
from legato.models import QuarantinedRun
from legato.models_from_rows import quarantined_from_row

# How many runs' workflow names a Client remembers for signal().
_REMEMBERED_RUNS = 10_000


class RunControls(ClientBase):
    """Acting on runs that exist: signal, emit, cancel, resume; and deploying an app."""

    @schema_explained
    async def deploy(self, app: App | None = None) -> dict[str, int]:
        """Store every workflow of ``app`` (children included) and mark those versions
        deployed. Unchanged specs keep their version. Returns name -> version."""
        target = app or self.app
        if target is None:
            raise UnknownWorkflow("nothing to deploy: pass an App")
        if not isinstance(target, App):
            raise InvalidArgument(f"deploy() takes a legato.App, not {target!r}")
        async with self.engine.begin() as conn:
            return await deploy_workflows(conn, target.workflows.values())

    @schema_explained
    async def signal(self, run_id: RunId, name: str, payload: Any = None) -> None:
        """Send a signal to a running run; buffered until a wait for ``name`` takes it."""
        run_id = as_run_id(run_id)
        check_name("signal name", name, InvalidArgument)
        what = f"signal {name!r}"
        shard = await self._shard_of(run_id)
        workflow_name = self._workflow_of.get(run_id)
        if workflow_name is None and self.app is not None:
            # The payload is checked against the model of the run's workflow.
            run = await self._read(lambda conn: self._running(conn, shard, run_id, what))
            workflow_name = run.workflow_name
        data = self._signal_payload(workflow_name, name, payload)
        if not await signals.send_now(self._driver, shard, run_id, name, data):
            self._workflow_of.pop(run_id, None)
            await self._read(lambda conn: self._running(conn, shard, run_id, what))  # says why
            raise RunFinished(f"cannot {what}: run {run_id} has just finished")
        if workflow_name is None:
            return
        self._workflow_of[run_id] = workflow_name
        self._workflow_of.move_to_end(run_id)
        if len(self._workflow_of) > _REMEMBERED_RUNS:
            self._workflow_of.popitem(last=False)

    @schema_explained
    async def emit(self, name: str, payload: Any = None) -> list[uuid.UUID]:
        """Signal every run currently waiting for event ``name``; returns their ids.

        A run that already has an unconsumed ``name`` signal (an earlier emit its
        decider has not taken yet) is skipped, so emitting twice in a row does not
        satisfy a later wait for the same event.

        Fan-out across shard keys: the waiting runs are found in one statement over
        every key, then signalled with one statement per key they fall in.
        """
        check_name("event name", name, InvalidArgument)
        # Checked before any run is found waiting: a payload no run could take is refused
        # even while none waits (each waiting run's model checks it again below).
        self._sized(plain_json(payload), f"payload of event {name!r}")
        shards = await self.shards()
        async with self.engine.begin() as conn:
            waiting = await tasks.open_waits(conn, name)
            # Each workflow checks the payload against its own event model, once.
            data = {
                workflow: self._signal_payload(workflow, name, payload)
                for workflow in sorted(set(waiting.values()))
            }
            reached: list[uuid.UUID] = []
            for shard, run_ids in shards.group(waiting).items():
                deliveries = [signals.Delivery(i, data[waiting[i]]) for i in run_ids]
                reached += await signals.send_many(conn, shard, name, deliveries)
            return sorted(reached)

    def _signal_payload(self, workflow_name: str | None, name: str, payload: Any) -> JsonValue:
        definition = (
            self.app.workflows.get(workflow_name)
            if self.app is not None and workflow_name is not None
            else None
        )
        if definition is not None:
            try:
                data = definition.validate_event(name, payload)
            except (InputValidationError, UnknownEventError) as error:
                raise InvalidInput(str(error)) from None
        else:
            data = plain_json(payload)
        return self._sized(data, f"payload of signal {name!r}")

    @schema_explained
    async def resume(self, run_id: RunId) -> bool:
        """Make a quarantined run's decision due again with a clean failure count (after
        fixing what made it fail); False if the run is not quarantined. Raises
        ``RunNotFound`` for an unknown run."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)
        async with self.engine.begin() as conn:
            if await decide_queue.resume(conn, shard, run_id):
                return True
            if await runs.get(conn, shard, run_id) is None:
                raise RunNotFound(f"no run {run_id}")
        return False

    @schema_explained
    async def list_quarantined(self, limit: int = 50) -> list[QuarantinedRun]:
        """Runs whose decisions failed too often in a row, most recently parked first,
        each with its last error (``legato runs list --quarantined``). Fan-out across
        shard keys: one statement over every key."""
        check_limit(limit)
        parked = await self._read(lambda conn: decide_queue.quarantined(conn, limit))
        return [quarantined_from_row(row) for row in parked]

    @schema_explained
    async def cancel(self, run_id: RunId) -> None:
        """Ask a running run to cancel: pending work is cancelled, running tasks are
        interrupted, and the run finishes CANCELLED."""
        run_id = as_run_id(run_id)
        shard = await self._shard_of(run_id)
        async with self.engine.begin() as conn:
            await self._running(conn, shard, run_id, "cancel")
            await decide_queue.enqueue(conn, shard, [run_id], "cancel requested")
            if not await runs.request_cancel(conn, shard, run_id):
                raise RunFinished(f"run {run_id} has already finished; nothing to cancel")
