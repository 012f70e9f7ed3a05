"""``FairShare``: the attempts of a task share its queue fairly between the values of a key
(a tenant, a customer), claimed round-robin by weight instead of oldest first.

The key and the weight are computed from the task's inputs when the decider enqueues an
attempt and stored on its ``task_queue`` row; the worker's fair claim
(``legato.engine.repositories.fair_claims``) reads them. What a key function must return
is checked here, by pure functions both sides use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from legato.errors import FairShareKeyError, TaskDefinitionError
from legato.limits import MAX_NAME_LENGTH, name_problem

# A weight is a small int: the claim divides a key's turns by it.
MAX_FAIR_WEIGHT = 1_000
# The key of the attempts a fair queue holds that belong to no key: those of its tasks
# without ``fair_share``. A user's key is never empty, so it cannot collide.
UNKEYED = ""


@dataclass(frozen=True)
class FairShare:
    """Share the task's queue fairly between the values of ``key(*inputs)``.

    Attempts of different keys are claimed round-robin: the key with the fewest
    attempts running (divided by its ``weight``) goes next, so a backlog of one key
    waits behind the others' attempts, not the other way round. ``key`` returns a
    non-empty string (or an int) of at most 200 printable characters; ``weight`` is an
    int from 1 to 1000, or a function of the inputs returning one: a key of weight 3
    gets three turns to a weight-1 key's one.
    """

    key: Callable[..., object]
    weight: int | Callable[..., object] = 1

    def __post_init__(self) -> None:
        if not callable(self.key):
            raise TaskDefinitionError(
                f"FairShare(key={self.key!r}): key must be a function of the task's inputs"
            )
        if not callable(self.weight) and weight_problem(self.weight) is not None:
            raise TaskDefinitionError(
                f"FairShare(weight={self.weight!r}): weight {weight_problem(self.weight)}"
            )

    def of(self, task_name: str, inputs: Sequence[object]) -> tuple[str, int]:
        """The (key, weight) of an attempt of ``task_name`` with parsed ``inputs``; raises
        :class:`FairShareKeyError` naming the task and the value when a function raises
        or returns something that is no key or weight."""
        try:
            key = self.key(*inputs)
        except Exception as error:
            raise FairShareKeyError(
                f"task {task_name!r}: FairShare key function raised {error!r}; it must "
                f"return the attempt's key for every input"
            ) from error
        text = key_text(key)
        if text is None:
            raise FairShareKeyError(
                f"task {task_name!r}: FairShare key {key!r} is no key: {KEY_RULE}"
            )
        weight: object = self.weight
        if callable(weight):
            try:
                weight = weight(*inputs)
            except Exception as error:
                raise FairShareKeyError(
                    f"task {task_name!r}: FairShare weight function raised {error!r}"
                ) from error
        problem = weight_problem(weight)
        if problem is not None:
            raise FairShareKeyError(f"task {task_name!r}: FairShare weight {weight!r} {problem}")
        assert isinstance(weight, int)  # weight_problem checked it
        return text, weight


KEY_RULE = f"a key is a non-empty str of at most {MAX_NAME_LENGTH} printable characters, or an int"


def key_text(value: object) -> str | None:
    """The stored form of a key function's result, or None when it is no key: an int
    (not a bool) as its decimal string, a non-empty printable str as itself."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and name_problem(value) is None:
        return value
    return None


def weight_problem(value: object) -> str | None:
    """Why ``value`` is no weight, or None."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_FAIR_WEIGHT:
        return f"must be an int from 1 to {MAX_FAIR_WEIGHT}"
    return None
