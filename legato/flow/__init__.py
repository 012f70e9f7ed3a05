"""The typed workflow builder users write against.

```python
@task(retry=Retry(attempts=5))
async def create_user(ctx: TaskContext, signup: Signup) -> User: ...

@workflow("signup")
def signup(flow: Flow[Signup]) -> Node[Active]:
    user = flow.run(create_user, flow.input)
    ...
```
"""

from legato.flow.app import App
from legato.flow.batch import Batch, BatchContext, BatchTask, batch_task
from legato.flow.builder import MISSING, FailureInfo, Flow, Node, Switch
from legato.flow.definition import (
    InputValidationError,
    UnknownEventError,
    Workflow,
    WorkflowDefinition,
    workflow,
)
from legato.flow.fair_share import FairShare
from legato.flow.spec import (
    SpecError,
    VersionDecision,
    WorkflowSpec,
    resolve_version,
)
from legato.flow.task_options import Cache, Concurrency, RateLimit, Retry
from legato.flow.tasks import (
    Task0,
    Task1,
    Task2,
    Task3,
    Task4,
    Task5,
    TaskArgumentsError,
    TaskDefinition,
    TaskDefinitionError,
    task,
)

__all__ = [
    "MISSING",
    "App",
    "Batch",
    "BatchContext",
    "BatchTask",
    "Cache",
    "Concurrency",
    "FailureInfo",
    "FairShare",
    "Flow",
    "InputValidationError",
    "Node",
    "RateLimit",
    "Retry",
    "SpecError",
    "Switch",
    "Task0",
    "Task1",
    "Task2",
    "Task3",
    "Task4",
    "Task5",
    "TaskArgumentsError",
    "TaskDefinition",
    "TaskDefinitionError",
    "UnknownEventError",
    "VersionDecision",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowSpec",
    "batch_task",
    "resolve_version",
    "task",
    "workflow",
]
