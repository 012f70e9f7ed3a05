"""``App``: the workflows a runtime serves, their child workflows and their tasks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from legato.errors import UnknownTask, UnknownWorkflow
from legato.flow.definition import WorkflowDefinition
from legato.flow.spec import SpecError
from legato.flow.tasks import TaskDefinition, check_queue_limits, check_shared_limits
from legato.limits import check_type


class App:
    """The workflows (and, collected from them, the tasks) a runtime serves.

    Child workflows are included. Two different workflows or tasks with one name
    are an error. ``queue_limits`` caps the attempts leased at once per queue, across
    all workers (every process serving a queue must be given the same limits).
    """

    def __init__(
        self,
        workflows: Iterable[WorkflowDefinition] = (),
        *,
        queue_limits: Mapping[str, int] | None = None,
    ) -> None:
        if isinstance(workflows, WorkflowDefinition) or not isinstance(workflows, Iterable):
            raise SpecError(
                f"App(workflows) takes a list of workflows, e.g. App([signup]), not {workflows!r}"
            )
        found = _with_children(workflows)
        tasks: dict[str, TaskDefinition] = {}
        for wf in found.values():
            for t in wf.tasks.values():
                other = tasks.get(t.name)
                if other is not None and other is not t:
                    raise SpecError(f"two different tasks are named {t.name!r}")
                tasks[t.name] = t
        self.workflows: Mapping[str, WorkflowDefinition] = found
        self.tasks: Mapping[str, TaskDefinition] = tasks
        self.queue_limits: Mapping[str, int] = check_queue_limits(queue_limits or {})
        check_shared_limits(tasks.values())

    def workflow(self, name: str) -> WorkflowDefinition:
        try:
            return self.workflows[name]
        except (KeyError, TypeError):  # TypeError: a name that is no str (unhashable)
            raise UnknownWorkflow(
                f"unknown workflow {name!r:.80}; known: {sorted(self.workflows)}"
            ) from None

    def task(self, name: str) -> TaskDefinition:
        try:
            return self.tasks[name]
        except (KeyError, TypeError):  # TypeError: a name that is no str (unhashable)
            raise UnknownTask(f"unknown task {name!r:.80}; known: {sorted(self.tasks)}") from None


def _with_children(workflows: Iterable[WorkflowDefinition]) -> dict[str, WorkflowDefinition]:
    """``workflows`` and, transitively, the child workflows they start; name -> workflow.

    Parents come before the children they start. Two different workflows (by spec)
    with one name are an error.
    """
    found: dict[str, WorkflowDefinition] = {}
    pending = list(workflows)
    while pending:
        wf = pending.pop(0)
        check_type("each workflow passed to App()", wf, WorkflowDefinition, SpecError)
        seen = found.get(wf.name)
        if seen is not None:
            if seen is not wf and seen.spec_hash != wf.spec_hash:
                raise SpecError(f"two different workflows are named {wf.name!r}")
            continue
        found[wf.name] = wf
        pending.extend(wf.children.values())
    return found
