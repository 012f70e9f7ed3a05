"""Which queues a process's worker serves (pure): the ``queues`` a ``Runtime`` is given,
checked, or every queue its app's tasks use; and the lease role of such a worker."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from legato.errors import ConfigurationError
from legato.flow import App
from legato.limits import check_name

log = logging.getLogger("legato")


def check_queues(queues: object) -> tuple[str, ...]:
    """``queues`` as a tuple of queue names, or ``ConfigurationError``."""
    if isinstance(queues, str) or not isinstance(queues, tuple | list) or not queues:
        raise ConfigurationError(
            f"queues={queues!r} must be a non-empty tuple of queue names, e.g. ('default',)"
        )
    return tuple(check_name("queues: queue", queue, ConfigurationError) for queue in queues)


def served_queues(queues: tuple[str, ...] | None, app: App, *, works: bool) -> tuple[str, ...]:
    """The queues a worker of ``app`` serves: ``queues``, else every queue the app's tasks
    use (``default`` for an app without tasks). A given queue no task uses is logged when
    the process ``works``: not an error (another deploy's tasks may use it), usually a
    typo."""
    used = sorted({t.queue for t in app.tasks.values()})
    unused = sorted(set(queues or ()) - set(used))
    if unused and works:
        log.warning(
            "no task of this app uses queue %s: this worker runs only the app's tasks, "
            "so it will take nothing from it (queues the app's tasks use: %s)",
            ", ".join(map(repr, unused)),
            ", ".join(used) or "none",
        )
    return queues or tuple(used) or ("default",)


def worker_role(queues: Iterable[str], app: App) -> str:
    """The lease role of a worker: its queues and a digest of the tasks it can run.

    Workers running the same code on the same queues share their keys. A worker serving
    other queues, or running other code (an old and a new deploy side by side, each
    leaving the tasks it lacks to the other), is a member of another role, so every key
    of every queue stays covered by every kind of worker that serves it.
    """
    served = sorted(set(queues))
    names = sorted(name for name, task in app.tasks.items() if task.queue in served)
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:8]
    return f"worker:{','.join(served)}#{digest}"
