"""Value types persisted in JSONB columns, shared by the schema and the decider.

They live at the schema level so that ``legato.schema.tables`` can type a column
with them without importing the engine; the decider's model re-exports them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TaskError(BaseModel):
    """Why an attempt failed: the exception's type and message as recorded in history.

    Stored in ``tasks.error`` and ``runs.error``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    message: str
    retryable: bool = True
    traceback: str | None = None
