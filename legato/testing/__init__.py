"""Test Legato workflows: in memory, one task at a time, or against PostgreSQL.

* :class:`Simulator` runs a workflow in memory with a fake clock (no database).
* :func:`run_task` calls one task with a fake :class:`~legato.TaskContext`.
* ``pytest_plugins = ["legato.testing.plugin"]`` gives fixtures for a migrated
  database, a client and an in-process runtime (see docs/testing.md).
"""

from legato.testing.simulator import SimulationError, Simulator
from legato.testing.tasks import run_task, task_context

__all__ = ["SimulationError", "Simulator", "run_task", "task_context"]
