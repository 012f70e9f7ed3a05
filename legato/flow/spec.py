"""Compiled workflow specs: what the decider evaluates, with no Python callables in it.

A :class:`WorkflowSpec` is plain pydantic data. Tasks are referenced by their
registered name and carry the options the decider needs (queue, priority,
retry policy, timeouts). The spec's canonical JSON (sorted keys, no
whitespace) is hashed with SHA-256; the hash decides the version
(:func:`resolve_version`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from legato.errors import SpecError as SpecError
from legato.limits import check_name

SPEC_FORMAT = 1
INPUT_NODE_ID = "$input"
HANDLER_NODE_ID = "$on_failure"

JsonScalar = str | int | float | bool | None


class FailureInfo(BaseModel):
    """What a workflow's failure handler receives: the node that failed for good, and why."""

    workflow: str
    node_id: str
    iteration: int
    attempt: int
    error_type: str
    message: str
    input: JsonValue = None


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, /, **data: object) -> None:
        # pydantic wraps what a validator raises (check_spec's SpecError included) in a
        # ValidationError; users get the SpecError, or one naming the bad field.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _spec_error(type(self).__name__, data, exc) from None


def _spec_error(model: str, data: Mapping[str, object], exc: ValidationError) -> SpecError:
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, SpecError):
            return cause
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "value"
    name = data.get("id", data.get("name"))
    label = f"{model} {name!r}" if isinstance(name, str) else model
    return SpecError(f"{label}: {where}: {first['msg']} (got {first.get('input')!r})")


class RetrySpec(_Spec):
    """Retry policy of a task: ``attempts`` counts the first attempt too."""

    attempts: int = Field(default=3, ge=1)
    initial_interval: float = Field(default=1.0, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_interval: float = Field(default=300.0, ge=0)
    jitter: float = Field(default=0.2, ge=0, le=1)


class TimeoutSpec(_Spec):
    """Timeouts of one attempt, in seconds; ``None`` means none."""

    schedule_to_start: float | None = Field(default=None, gt=0)
    start_to_close: float | None = Field(default=None, gt=0)
    heartbeat: float | None = Field(default=None, gt=0)


class TaskSpec(_Spec):
    """A registered task as the decider sees it."""

    name: str
    queue: str = "default"
    priority: int = 0
    retry: RetrySpec = RetrySpec()
    timeouts: TimeoutSpec = TimeoutSpec()


class GuardSpec(_Spec):
    """The node runs only if switch ``switch`` chose case ``case``."""

    switch: str
    case: str


class _NodeBase(_Spec):
    id: str = Field(min_length=1)
    inputs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    guard: GuardSpec | None = None

    def dependencies(self) -> tuple[str, ...]:
        deps = (*self.inputs, *self.after)
        if self.guard is not None:
            deps = (*deps, self.guard.switch)
        return deps


class TaskNodeSpec(_NodeBase):
    kind: Literal["task"] = "task"
    task: str


class SleepNodeSpec(_NodeBase):
    kind: Literal["sleep"] = "sleep"
    seconds: float = Field(ge=0)


class EventNodeSpec(_NodeBase):
    kind: Literal["event"] = "event"
    event: str = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0)
    has_default: bool = False
    default: JsonValue = None
    payload_schema: dict[str, JsonValue] = Field(default_factory=dict)


class CaseSpec(_Spec):
    label: str
    value: JsonScalar


class SwitchNodeSpec(_NodeBase):
    kind: Literal["switch"] = "switch"
    field: str | None = None
    cases: tuple[CaseSpec, ...] = ()
    has_default: bool = False


class FirstOfNodeSpec(_NodeBase):
    kind: Literal["first_of"] = "first_of"


class MapNodeSpec(_NodeBase):
    kind: Literal["map"] = "map"
    task: str
    max_concurrency: int | None = Field(default=None, ge=1)


class ChildNodeSpec(_NodeBase):
    kind: Literal["child"] = "child"
    workflow: str


NodeSpec = Annotated[
    TaskNodeSpec
    | SleepNodeSpec
    | EventNodeSpec
    | SwitchNodeSpec
    | FirstOfNodeSpec
    | MapNodeSpec
    | ChildNodeSpec,
    Field(discriminator="kind"),
]

DEFAULT_CASE = "default"


class WorkflowSpec(_Spec):
    """A compiled workflow. Nodes are listed in a topological order (the build order)."""

    format: int = SPEC_FORMAT
    name: str = Field(min_length=1)
    nodes: tuple[NodeSpec, ...]
    output: str
    tasks: dict[str, TaskSpec] = Field(default_factory=dict)
    on_failure: str | None = None
    # Seconds from the run's first decision to its deadline (the decider's RUN_TIMEOUT).
    execution_timeout: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> WorkflowSpec:
        check_spec(self)
        return self

    def node(self, node_id: str) -> NodeSpec:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace: equal specs give equal bytes."""
        dumped = self.model_dump(mode="json")
        if dumped["execution_timeout"] is None:
            # Specs compiled before the field existed keep their hash, hence their version.
            del dumped["execution_timeout"]
        return canonical_json(dumped)

    @property
    def spec_hash(self) -> str:
        """SHA-256 of the canonical JSON, hex."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def event_names(self) -> frozenset[str]:
        return frozenset(n.event for n in self.nodes if isinstance(n, EventNodeSpec))

    def event_schemas(self, event: str) -> tuple[dict[str, JsonValue], ...]:
        """JSON schemas of the payloads the waits for ``event`` accept."""
        return tuple(
            n.payload_schema
            for n in self.nodes
            if isinstance(n, EventNodeSpec) and n.event == event
        )


def canonical_json(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_spec(spec: WorkflowSpec) -> None:
    """Reject duplicate ids, unknown references and tasks, cycles and an empty workflow."""
    check_name("workflow name", spec.name, SpecError)
    where = f"workflow {spec.name!r}"
    if not spec.nodes:
        raise SpecError(f"{where} is empty: it has no nodes")
    ids: set[str] = set()
    for node in spec.nodes:
        if node.id in ids:
            raise SpecError(f"{where}: duplicate node name {node.id!r}")
        if node.id.startswith("$"):
            raise SpecError(f"{where}: node name {node.id!r} may not start with '$'")
        check_name(f"{where}: node name", node.id, SpecError)
        if isinstance(node, EventNodeSpec):
            check_name(f"{where}: node {node.id!r}: event name", node.event, SpecError)
        if isinstance(node, ChildNodeSpec):
            check_name(f"{where}: node {node.id!r}: child workflow", node.workflow, SpecError)
        ids.add(node.id)
    by_id = {n.id: n for n in spec.nodes}
    for node in spec.nodes:
        for dep in node.dependencies():
            if dep != INPUT_NODE_ID and dep not in by_id:
                raise SpecError(f"{where}: node {node.id!r} depends on unknown node {dep!r}")
        if node.guard is not None:
            sw = by_id.get(node.guard.switch)
            if not isinstance(sw, SwitchNodeSpec):
                raise SpecError(
                    f"{where}: node {node.id!r} is guarded by {node.guard.switch!r}, "
                    "which is not a switch"
                )
            labels = {c.label for c in sw.cases} | ({DEFAULT_CASE} if sw.has_default else set())
            if node.guard.case not in labels:
                raise SpecError(
                    f"{where}: node {node.id!r} is guarded by unknown case "
                    f"{node.guard.case!r} of switch {sw.id!r}"
                )
        if isinstance(node, TaskNodeSpec | MapNodeSpec) and node.task not in spec.tasks:
            raise SpecError(f"{where}: node {node.id!r} uses unknown task {node.task!r}")
        if isinstance(node, MapNodeSpec) and len(node.inputs) != 1:
            raise SpecError(f"{where}: map node {node.id!r} needs exactly one input list")
        if isinstance(node, SwitchNodeSpec | ChildNodeSpec) and len(node.inputs) != 1:
            raise SpecError(f"{where}: node {node.id!r} needs exactly one input")
        if isinstance(node, FirstOfNodeSpec) and not node.inputs:
            raise SpecError(f"{where}: first_of node {node.id!r} needs at least one input")
    for name, task in spec.tasks.items():
        if task.name != name:
            raise SpecError(f"{where}: task registered as {name!r} is named {task.name!r}")
        check_name(f"{where}: task name", task.name, SpecError)
        check_name(f"{where}: task {task.name!r}: queue", task.queue, SpecError)
    if spec.on_failure is not None and spec.on_failure not in spec.tasks:
        raise SpecError(f"{where}: failure handler uses unknown task {spec.on_failure!r}")
    if spec.output != INPUT_NODE_ID and spec.output not in by_id:
        raise SpecError(f"{where}: output node {spec.output!r} is unknown")
    _check_acyclic(where, spec.nodes)


def _check_acyclic(where: str, nodes: Iterable[NodeSpec]) -> None:
    graph = {n.id: n.dependencies() for n in nodes}
    done: set[str] = set()
    visiting: list[str] = []

    def visit(node_id: str) -> None:
        if node_id in done or node_id == INPUT_NODE_ID:
            return
        if node_id in visiting:
            cycle = [*visiting[visiting.index(node_id) :], node_id]
            raise SpecError(f"{where}: cycle through node {node_id!r}: {' -> '.join(cycle)}")
        visiting.append(node_id)
        for dep in graph[node_id]:
            visit(dep)
        visiting.pop()
        done.add(node_id)

    for node_id in graph:
        visit(node_id)


def topological_order(spec: WorkflowSpec) -> tuple[NodeSpec, ...]:
    """The nodes ordered so every node comes after its dependencies (stable on spec order)."""
    placed: set[str] = {INPUT_NODE_ID}
    remaining = list(spec.nodes)
    ordered: list[NodeSpec] = []
    while remaining:
        for i, node in enumerate(remaining):
            if all(dep in placed for dep in node.dependencies()):
                ordered.append(node)
                placed.add(node.id)
                del remaining[i]
                break
        else:  # pragma: no cover - check_spec rejects cycles
            raise SpecError(f"workflow {spec.name!r} has a cycle")
    return tuple(ordered)


@dataclass(frozen=True)
class VersionDecision:
    """The version a spec deploys as, and whether that version is new."""

    version: int
    is_new: bool


def resolve_version(deployed: Mapping[int, str], spec_hash: str) -> VersionDecision:
    """Given ``version -> hash`` of the stored versions of a workflow, version ``spec_hash``.

    An identical spec keeps its version; a changed spec becomes max + 1 (1 for the first).
    """
    for version, existing in sorted(deployed.items()):
        if existing == spec_hash:
            return VersionDecision(version=version, is_new=False)
    return VersionDecision(version=max(deployed, default=0) + 1, is_new=True)
