"""The enums the schema stores as TEXT: defined in ``legato.enums`` (below the schema,
so that ``legato.errors`` can name them too) and re-exported here."""

from legato.enums import ACTIVE_TASK_STATES as ACTIVE_TASK_STATES
from legato.enums import CatchUp as CatchUp
from legato.enums import NodeKind as NodeKind
from legato.enums import RunStatus as RunStatus
from legato.enums import TaskState as TaskState
from legato.enums import TimerKind as TimerKind
