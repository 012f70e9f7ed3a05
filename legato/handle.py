"""``RunHandle``: what ``Client.start`` returns, typed by the workflow's output."""

from __future__ import annotations

import uuid
from typing import Any, Generic, Protocol, TypeVar

from pydantic import JsonValue

from legato.errors import InvalidOutput
from legato.flow import InputValidationError, Workflow

Out = TypeVar("Out")


class RunResults(Protocol):
    """What a handle needs of its ``Client``: the wait for a run's JSON result."""

    async def result(self, run_id: uuid.UUID, timeout: float | None = None) -> JsonValue: ...


class RunHandle(Generic[Out]):
    """A started run: its id, and a typed wait for its result."""

    def __init__(self, client: RunResults, run_id: uuid.UUID, workflow: Workflow[Any, Out] | None):
        self.client = client
        self.run_id = run_id
        self._workflow = workflow

    async def result(self, timeout: float | None = None) -> Out:
        """Wait for the run to finish; its output decoded, or ``RunFailed``."""
        output = await self.client.result(self.run_id, timeout=timeout)
        if self._workflow is None:
            return output  # type: ignore[return-value]  # untyped handle: JSON out
        try:
            return self._workflow.parse_output(output)
        except InputValidationError as error:
            raise InvalidOutput(
                f"run {self.run_id}: {error} (did the output type change since the run "
                "finished? client.result(run_id) returns the raw JSON)"
            ) from None

    def __repr__(self) -> str:
        return f"<run {self.run_id}>"
