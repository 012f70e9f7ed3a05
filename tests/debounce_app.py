"""Workflows the debounce tests start: one that runs its input at once, one that waits
for a "go" signal first (so a run can be started, yet unfinished, for as long as the
test needs)."""

from __future__ import annotations

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow

# The inputs the task bodies ran, in order: what a user sees executed.
EXECUTED: list[str] = []


class Note(BaseModel):
    text: str


class Go(BaseModel):
    ok: bool = True


@task()
async def echo(ctx: TaskContext, note: Note) -> str:
    EXECUTED.append(note.text)
    return note.text


@task()
async def echo_after(ctx: TaskContext, note: Note, go: Go) -> str:
    EXECUTED.append(note.text)
    return note.text


@workflow("digest")
def digest(flow: Flow[Note]) -> Node[str]:
    return flow.run(echo, flow.input)


@workflow("gated_digest")
def gated_digest(flow: Flow[Note]) -> Node[str]:
    go = flow.wait_for_event("go", Go)
    return flow.run(echo_after, flow.input, go)


app = App(workflows=[digest, gated_digest])
