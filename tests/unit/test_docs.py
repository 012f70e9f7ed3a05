"""The signup example in docs/flows.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from legato.engine.decider.model import FinishRun
from legato.flow import App, Workflow

from ._sim import Sim

DOC = Path(__file__).parents[2] / "docs" / "flows.md"


def test_signup_example_compiles_and_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    namespace: dict[str, object] = {"__name__": "flows_doc"}
    exec(compile("\n".join(blocks[:2]), str(DOC), "exec"), namespace)
    signup, app = namespace["signup"], namespace["app"]
    assert isinstance(signup, Workflow)
    assert isinstance(app, App)
    assert set(app.tasks) == {"create_user", "activate"}
    sim = Sim(signup.spec, signup.validate_input({"email": "ada@example.com"}))
    sim.step()
    sim.complete("create_user", {"user_id": "ada"})
    sim.signal("signup.confirmed", {"code": "7"})
    sim.step()
    sim.complete("activate", {"user_id": "ada", "code": "7"})
    (finish,) = [a for a in sim.step() if isinstance(a, FinishRun)]
    assert finish.output == {"user_id": "ada", "code": "7"}
