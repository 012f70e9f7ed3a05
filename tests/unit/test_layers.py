"""The package's layers, enforced: an import that crosses a layer the wrong way fails here.

Imports are read with ``ast`` (no module is executed), transitively, counting the package
``__init__`` each dotted import runs and skipping ``if TYPE_CHECKING:`` blocks (those never
run). Imports inside functions count: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "legato"

DECIDER = "legato.engine.decider"
REPOSITORIES = "legato.engine.repositories"
CLI = "legato.cli"
# The supervised loops (every module of the ``loops`` folder) and what runs them:
# everything that talks to the database on a schedule rather than answering one call.
LOOPS = ("legato.engine.loops", "legato.runtime")


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(nodes: Iterable[ast.stmt]) -> Iterable[ast.AST]:
    """Every node of ``nodes`` except the bodies of ``if TYPE_CHECKING:``."""
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _runtime_nodes(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _runtime_nodes(
                    child for child in children if isinstance(child, ast.stmt)
                )
        for handler in getattr(node, "handlers", []):
            yield from _runtime_nodes(handler.body)


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` runs ``a``, ``a.b`` and ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def module_imports(root: Path) -> dict[str, set[str]]:
    """Module name -> every module its import statements execute (package ``__init__``s
    included), for each ``.py`` under ``root`` (a package directory)."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.update(_with_parents(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.update(_with_parents(base))
                # ``from pkg import sub`` runs ``pkg.sub`` when ``sub`` is a module.
                found.update(
                    f"{base}.{alias.name}"
                    for alias in node.names
                    if f"{base}.{alias.name}" in modules
                )
        # Importing ``a.b.c`` first runs the packages above it.
        found.update(_with_parents(name)[:-1])
        found.discard(name)
        graph[name] = found
    return graph


def closure(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module importing ``start`` runs, in the package or outside it."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for imported in graph.get(stack.pop(), set()):
            if imported not in seen:
                seen.add(imported)
                stack.append(imported)
    return seen


def violations(
    graph: Mapping[str, set[str]], layer: str, forbidden: Iterable[str]
) -> dict[str, list[str]]:
    """For each module of ``layer``, what it reaches (transitively) that it must not."""
    forbidden = tuple(forbidden)
    found: dict[str, list[str]] = {}
    for module in sorted(graph):
        if _under(module, [layer]):
            bad = sorted(m for m in closure(graph, module) if _under(m, forbidden))
            if bad:
                found[module] = bad
    return found


GRAPH = module_imports(PACKAGE_ROOT)


def test_the_scan_sees_the_package() -> None:
    # A scan that found nothing would pass every rule below.
    assert {DECIDER, f"{DECIDER}.decide", f"{REPOSITORIES}.runs", "legato.schema.tables"} <= set(
        GRAPH
    )
    assert "sqlalchemy" in closure(GRAPH, "legato.schema.tables")
    assert f"{REPOSITORIES}.runs" in closure(GRAPH, "legato.engine.loops.decider")
    # The folder rules cover every loop: each module of the loops folder is under LOOPS.
    loop_modules = {m for m in GRAPH if _under(m, ["legato.engine.loops"])}
    assert {"legato.engine.loops.worker", "legato.engine.loops.relay"} <= loop_modules


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        (DECIDER, ["sqlalchemy", "asyncpg", REPOSITORIES, *LOOPS]),
        ("legato.schema", ["legato.engine", "legato.flow"]),
        ("legato.flow", [REPOSITORIES, *LOOPS]),
        (REPOSITORIES, [*LOOPS, CLI]),
    ],
)
def test_layer_does_not_reach_upwards(layer: str, forbidden: list[str]) -> None:
    assert violations(GRAPH, layer, forbidden) == {}


def test_only_main_imports_the_cli() -> None:
    importers = sorted(
        module
        for module, imported in GRAPH.items()
        if not _under(module, [CLI]) and any(_under(m, [CLI]) for m in imported)
    )
    assert importers == ["legato.__main__"]


def test_the_scan_catches_a_crossing(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("")
    (package / "high" / "__init__.py").write_text("import sqlalchemy\n")
    (package / "high" / "db.py").write_text("")
    (package / "low" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n"
    )
    (package / "low" / "pure.py").write_text("def f() -> None:\n    from pkg.high import db\n")
    graph = module_imports(package)
    assert violations(graph, "pkg.low", ["sqlalchemy"]) == {"pkg.low.pure": ["sqlalchemy"]}
    assert violations(graph, "pkg.low", ["pkg.high"]) == {
        "pkg.low.pure": ["pkg.high", "pkg.high.db"]
    }


def test_importing_the_decider_does_not_load_sqlalchemy() -> None:
    probe = (
        "import sys, legato.engine.decider\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'asyncpg')"
        " or m.startswith(('legato.client', 'legato.engine.loops.worker', 'legato.engine.repo'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_lazy_root_resolves_every_public_name() -> None:
    import legato

    missing = [name for name in legato.__all__ if getattr(legato, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        legato.Nope  # type: ignore[attr-defined]  # noqa: B018


def _every_node(nodes: Iterable[ast.stmt]) -> Iterable[ast.AST]:
    """Every node of ``nodes``, ``if TYPE_CHECKING:`` blocks included (what mypy reads)."""
    for node in nodes:
        yield from ast.walk(node)


def test_the_hand_off_does_not_import_the_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The hand-off and the worker know each other only through the protocols of
    # legato.engine.transport.handoff: no import circle, not even for the type checker.
    monkeypatch.setitem(globals(), "_runtime_nodes", _every_node)
    scratch = tmp_path / "pkg"
    scratch.mkdir()
    (scratch / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.typed\n"
    )
    (scratch / "typed.py").write_text("")
    assert "pkg.typed" in module_imports(scratch)["pkg"]  # the scan reads TYPE_CHECKING
    typed = module_imports(PACKAGE_ROOT)
    # The lazy root names every public module for the type checker: not a dependency.
    typed["legato"] = set()
    assert "legato.engine.loops.worker" not in closure(typed, "legato.engine.transport.handoff")


def test_the_testing_package_reaches_the_loops_only_through_the_runtime() -> None:
    # The simulator shares the loops' pure rules (legato.engine.attempts,
    # legato.engine.timer_semantics), never the loops themselves. The pytest plugin's
    # legato_runtime fixture is a real Runtime: it reaches the loops through it alone.
    found = violations(GRAPH, "legato.testing", ["legato.engine.loops"])
    assert set(found) <= {"legato.testing.plugin"}
    assert not any(_under(m, ["legato.engine.loops"]) for m in GRAPH["legato.testing.plugin"])
    assert "legato.testing.simulator" in GRAPH  # the rule looked at the simulator
