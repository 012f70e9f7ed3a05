"""The ``Client``'s starts: one run (``Client.start`` delegates here once its overloads
have typed the call), many runs of one workflow, their inputs checked and sized."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.arguments import RunId, as_run_id, check_start_at
from legato.client.base import plain_json, schema_explained
from legato.client.reads import RunReads
from legato.debounce import Debounce
from legato.engine.debounced_start import start_debounced
from legato.engine.repositories import definitions, idempotency_keys, partitions, runs
from legato.errors import (
    InvalidArgument,
    InvalidInput,
    InvalidRunId,
    PayloadTooLarge,
    RunAlreadyExists,
    UnknownWorkflow,
)
from legato.flow import InputValidationError, Workflow, WorkflowDefinition
from legato.handle import RunHandle
from legato.limits import check_idempotency_key, check_name
from legato.observability import tracing
from legato.starting import start_connection

In = TypeVar("In")
Out = TypeVar("Out")


class StartingRuns(RunReads):
    """Starting runs; a started run's handle waits through the reads."""

    @schema_explained
    async def _start_run(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any,
        idempotency_key: str | None,
        run_id: RunId | None,
        start_at: datetime | None,
        connection: AsyncConnection | None,
        shard_key: str | None,
    ) -> RunHandle[Any]:
        _check_connection(connection)
        name, definition = self._target(workflow)
        payload = self._validated_input(definition, name, input)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key, InvalidArgument)
        if start_at is not None:
            check_start_at(start_at, datetime.now(UTC))
        given_id = None if run_id is None else as_run_id(run_id)
        shards = await self.shards()
        chosen = None
        if shard_key is not None:
            chosen = shards.of_key(shard_key)
        elif idempotency_key is not None:
            chosen = shards.of_key(idempotency_key)
        if given_id is not None:
            if chosen is not None and shards.of_run(given_id) != chosen:
                by = (
                    f"shard_key={shard_key!r}"
                    if shard_key is not None
                    else f"idempotency_key={idempotency_key!r}"
                )
                raise InvalidArgument(
                    f"run_id {given_id} lies in shard {shards.of_run(given_id)}, but {by} "
                    f"puts the run in shard {chosen}: omit run_id, or generate it with the "
                    f"key (Shards.new_run_id({chosen}), from await client.shards())"
                )
            await self._check_run_id(given_id)
        new_id = given_id or shards.new_run_id(chosen)
        shard = shards.of_run(new_id)
        try:
            return await self._start_one(
                workflow,
                name,
                definition,
                payload,
                shard,
                new_id,
                idempotency_key,
                start_at,
                connection,
            )
        except IntegrityError:
            if given_id is None or await self._read(lambda c: runs.get(c, shard, given_id)) is None:
                raise
            raise RunAlreadyExists(
                f"a run with id {given_id} already exists: run ids are unique, so pass a "
                "fresh legato.uuid7() (or an idempotency_key to make starts repeatable)"
            ) from None

    async def _start_one(
        self,
        workflow: Workflow[Any, Any] | str,
        name: str,
        definition: WorkflowDefinition | None,
        payload: JsonValue,
        shard: int,
        new_id: uuid.UUID,
        idempotency_key: str | None,
        start_at: datetime | None,
        connection: AsyncConnection | None,
    ) -> RunHandle[Any]:
        own = definition if isinstance(workflow, WorkflowDefinition) else None
        version = self._versions.known(own) if own is not None else None
        if connection is not None and own is not None:
            version = await self._versions.stored(self.engine, own)
        # The caller's trace context goes with the run: its task spans join that trace.
        trace = tracing.capture()
        new = runs.NewRun(
            new_id, name, version or 0, payload, None, idempotency_key, start_at, trace
        )
        if version is not None and idempotency_key is None:
            # The common case is one statement, atomic on its own: one round trip.
            if connection is None:
                await runs.start_one(self._driver, shard, new, "started")
                # A signal to it from this client then needs no read of the run.
                self._remember_workflow(new_id, name)
            else:
                async with start_connection(
                    connection, self._autocommit, self.schema, self.engine
                ) as conn:
                    await self._start(conn, shard, [new])
            return RunHandle(self, new_id, _typed(workflow))
        async with start_connection(
            connection, self.engine.begin, self.schema, self.engine
        ) as conn:
            version = await self._version_in(conn, own, name)
            if idempotency_key is not None:
                existing = await idempotency_keys.claim(
                    conn,
                    shard,
                    name,
                    idempotency_key,
                    new_id,
                    datetime.now(UTC) + self.idempotency_retention,
                )
                if existing is not None:
                    return RunHandle(self, existing, _typed(workflow))
            await self._start(conn, shard, [replace(new, workflow_version=version)])
        if own is not None and connection is None:
            self._versions.remember(own, version)
        return RunHandle(self, new_id, _typed(workflow))

    async def _version_in(
        self, conn: AsyncConnection, own: WorkflowDefinition | None, name: str
    ) -> int:
        """The version a start writes in ``conn``'s transaction: ``own``'s (stored if
        new), or the deployed version of ``name``."""
        if own is not None:
            return await self._versions.version_of(conn, own)
        version = await definitions.deployed_version(conn, name)
        if version is None:
            raise UnknownWorkflow(
                f"unknown workflow {name!r}: no deployed version "
                "(deploy it with `legato deploy --app module:app`, or start the "
                "Workflow object itself)"
            )
        return version

    @schema_explained
    async def _start_debounced(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any,
        debounce: Debounce,
        connection: AsyncConnection | None,
        shard_key: str | None,
        fixed: Mapping[str, object],
    ) -> RunHandle[Any]:
        """``start(..., debounce=...)``: checked and versioned as any start, then the
        window's run (legato/engine/debounced_start.py). ``fixed`` holds the options a
        debounce decides itself (``idempotency_key``, ``run_id``, ``start_at``)."""
        if not isinstance(debounce, Debounce):
            raise InvalidArgument(f"debounce={debounce!r} must be a legato.Debounce, or None")
        given = sorted(option for option, value in fixed.items() if value is not None)
        if given:
            raise InvalidArgument(
                f"start() with debounce= takes no {', '.join(given)}: the debounce window "
                "decides the run's id and start (drop them, or drop debounce=)"
            )
        _check_connection(connection)
        name, definition = self._target(workflow)
        payload = self._validated_input(definition, name, input)
        shards = await self.shards()
        shard = shards.of_key(debounce.key if shard_key is None else shard_key)
        own = definition if isinstance(workflow, WorkflowDefinition) else None
        if connection is not None and own is not None:
            await self._versions.stored(self.engine, own)
        new = runs.NewRun(
            shards.new_run_id(shard), name, 0, payload, trace_context=tracing.capture()
        )
        async with start_connection(
            connection, self.engine.begin, self.schema, self.engine
        ) as conn:
            version = await self._version_in(conn, own, name)
            run_id = await start_debounced(
                conn, shard, debounce, replace(new, workflow_version=version), datetime.now(UTC)
            )
        if own is not None and connection is None:
            self._versions.remember(own, version)
        return RunHandle(self, run_id, _typed(workflow))

    @schema_explained
    async def start_many(
        self,
        workflow: Workflow[In, Out],
        inputs: Sequence[In],
        *,
        connection: AsyncConnection | None = None,
        shard_key: str | None = None,
    ) -> list[RunHandle[Out]]:
        """Start many runs of one workflow in one transaction: one statement (a statement
        writes every table of its runs; on a distributed installation one per shard key
        the runs fall in). With ``shard_key`` every run goes to that key's shard;
        without, the runs spread over the keys. With ``connection``, in the caller's
        transaction, as ``start``."""
        if not isinstance(workflow, WorkflowDefinition):
            raise InvalidArgument(
                f"start_many() takes a Workflow object, not {workflow!r} "
                "(start runs by name one at a time with start())"
            )
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            raise InvalidArgument(
                f"start_many() takes a sequence of inputs, not {type(inputs).__name__}"
            )
        _check_connection(connection)
        payloads: list[JsonValue] = []
        for i, item in enumerate(inputs):
            try:
                payloads.append(self._validated_input(workflow, workflow.name, item))
            except (InvalidInput, PayloadTooLarge) as error:
                raise type(error)(f"start_many() item {i}: {error}") from None
        shards = await self.shards()
        chosen = None if shard_key is None else shards.of_key(shard_key)
        if not payloads:
            return []
        ids = [shards.new_run_id(chosen) for _ in payloads]
        trace = tracing.capture()
        if connection is not None:
            await self._versions.stored(self.engine, workflow)
        async with start_connection(
            connection, self.engine.begin, self.schema, self.engine
        ) as conn:
            version = await self._versions.version_of(conn, workflow)
            new_runs = [
                runs.NewRun(run_id, workflow.name, version, payload, trace_context=trace)
                for run_id, payload in zip(ids, payloads, strict=True)
            ]
            await runs.start_runs_of_keys(conn, shards, new_runs, "started")
        if connection is None:
            self._versions.remember(workflow, version)
        return [RunHandle(self, run_id, workflow) for run_id in ids]

    async def _start(self, conn: AsyncConnection, shard: int, new_runs: list[runs.NewRun]) -> None:
        await runs.start_runs(conn, shard, new_runs, "started")

    def _target(self, workflow: object) -> tuple[str, WorkflowDefinition | None]:
        """The workflow's name, and the definition that validates its input."""
        if isinstance(workflow, WorkflowDefinition):
            return workflow.name, workflow
        if not isinstance(workflow, str):
            raise InvalidArgument(
                f"start() takes a Workflow object or a workflow name, not {workflow!r}"
            )
        name = check_name("workflow name", workflow, InvalidArgument)
        return name, self.app.workflows.get(name) if self.app is not None else None

    def _validated_input(
        self, definition: WorkflowDefinition | None, workflow: str, value: object
    ) -> JsonValue:
        what = f"input of workflow {workflow!r}"
        if definition is None:  # by name, no model to check against
            return self._sized(plain_json(value), what)
        try:
            payload = definition.validate_input(value)
        except InputValidationError as error:
            raise InvalidInput(str(error)) from None
        except RecursionError:
            raise InvalidInput(f"{what} is nested too deeply to validate") from None
        return self._sized(payload, what)

    async def _check_run_id(self, run_id: uuid.UUID) -> None:
        if self._bounds is None:
            self._bounds = await self._read(partitions.run_partition_bounds)
        try:
            partitions.check_run_id(run_id, self._bounds)
        except InvalidRunId:  # partitions may have been added since
            self._bounds = await self._read(partitions.run_partition_bounds)
            partitions.check_run_id(run_id, self._bounds)


def _check_connection(connection: object) -> None:
    if connection is None:
        return
    if not isinstance(connection, AsyncConnection) or connection.closed:
        state = "a closed AsyncConnection" if isinstance(connection, AsyncConnection) else None
        raise InvalidArgument(
            f"connection={state or repr(connection)} must be an open AsyncConnection in the "
            "caller's transaction (async with engine.begin() as conn), or None"
        )


def _typed(workflow: object) -> Workflow[Any, Any] | None:
    return workflow if isinstance(workflow, Workflow) else None
