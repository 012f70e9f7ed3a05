"""The deploy check: can every run in flight finish with the new code?

A run keeps the workflow version it started on: the decider walks that version's stored
spec, while the workers that run its tasks, and the clients that signal it, load the new
app. ``check_deploy(engine, app)`` reads every RUNNING run (quarantined ones included),
and for each node its version may still run (not completed, not skipped, not on a switch
case already passed over) asks the new app:

* **tasks** (task and map nodes, the failure handler): the task exists, on the queue the
  version's spec queues its attempts on, with as many inputs as the node passes, each
  accepting the value it will get — a value the run has stored (the run's input, a
  completed node's output, a buffered signal) is validated with the new model; a value
  still to be produced (by a task, an event, a child run of the new code) is compared
  as JSON schemas (:mod:`legato.schema_compat`);
* **events** (open and future waits): the new workflow still waits for the event (a
  client with the new app refuses a signal it does not wait for), its models accept
  what the version's stored payload schema accepted, and the signals already buffered;
* **child workflows**: the new app has the workflow (child runs start the deployed
  version) and its input model accepts what the node will pass.

Each reason comes back once per version, with how many runs it strands. Everything but
:func:`check_deploy` is pure.

The modules: ``report.py`` (what a run has stored, what one run's check finds, and the
report the findings are counted into), ``version_check.py`` (one stored version's
checks against the new app, run by run), ``assessment.py`` (the runs counted per
version into the report) and ``scan.py`` (``check_deploy``: the runs in flight, read
page by page).
"""

from legato.deploy_check.assessment import Assessment
from legato.deploy_check.report import DeployReport, Finding, Risk, RunState, VersionReport
from legato.deploy_check.scan import check_deploy
from legato.deploy_check.version_check import VersionCheck

__all__ = [
    "Assessment",
    "DeployReport",
    "Finding",
    "Risk",
    "RunState",
    "VersionCheck",
    "VersionReport",
    "check_deploy",
]
