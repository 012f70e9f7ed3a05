"""The package's layers, enforced: an import that crosses a layer the wrong way fails here.

Imports are read with ``ast`` (no module is executed), transitively, counting the package
``__init__`` each dotted import runs, imports inside functions (a deferred import is still
a dependency) and ``if TYPE_CHECKING:`` blocks (what the type checker reads: a circle
there is a circle of the design). The one exception is a lazy package face (``legato``,
``legato.schema``: a ``__getattr__`` loading each name from the module its
``TYPE_CHECKING`` block names): importing a name from it depends on the module that
defines the name, not on every module the face can hand out.

The rules are not written here: they are the table "Rules" of docs/architecture.md, read
by this module, and every layer they name is a folder (a package) or a module of the
tree, so a module belongs to a layer by where it stands. The folders stand in layers too
(no circle between them); the one arrow that runs back up is ``BACK_ARROWS``, which the
same page must name.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO_ROOT / "legato"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"

DECIDER = "legato.engine.decider"
REPOSITORIES = "legato.engine.repositories"
CLI = "legato.cli"


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` runs ``a``, ``a.b`` and ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _lazy_names(tree: ast.Module) -> dict[str, str] | None:
    """A lazy face's names and the module each comes from (its ``if TYPE_CHECKING:``
    imports), or None when the module is not a lazy face (no module ``__getattr__``)."""
    top = [n for n in tree.body if isinstance(n, ast.If)]
    has_getattr = any(
        isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
        for branch in top
        for node in [*branch.body, *branch.orelse]
    )
    if not has_getattr:
        return None
    names: dict[str, str] = {}
    for branch in top:
        if _is_type_checking(branch.test):
            for node in branch.body:
                if isinstance(node, ast.ImportFrom) and node.module:
                    names.update({alias.asname or alias.name: node.module for alias in node.names})
    return names


def _nodes(nodes: Iterable[ast.AST], typed: bool) -> Iterable[ast.AST]:
    """Every node under ``nodes``; without ``typed``, not the bodies of ``if TYPE_CHECKING:``
    (what runs)."""
    for node in nodes:
        if not typed and isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _nodes(node.orelse, typed)
            continue
        yield node
        yield from _nodes(ast.iter_child_nodes(node), typed)


def module_imports(root: Path, *, typed: bool = True) -> dict[str, set[str]]:
    """Module name -> every module its import statements name (``typed``: the
    ``TYPE_CHECKING`` ones too) or run (package ``__init__``s included), for each ``.py``
    under ``root`` (a package directory)."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    faces = {name: names for name, tree in trees.items() if (names := _lazy_names(tree))}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        package = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
        body: list[ast.stmt] = tree.body
        if name in faces:  # its TYPE_CHECKING block is its table of names, not a dependency
            body = [n for n in body if not (isinstance(n, ast.If) and _is_type_checking(n.test))]
        found: set[str] = set()
        for node in _nodes(body, typed):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.update(_with_parents(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.update(_with_parents(base))
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:  # ``from pkg import submodule``
                        found.add(f"{base}.{alias.name}")
                    elif alias.name in faces.get(base, {}):  # a name a lazy face hands out
                        found.update(_with_parents(faces[base][alias.name]))
        # Importing ``a.b.c`` first runs the packages above it.
        found.update(_with_parents(name)[:-1])
        found.discard(name)
        graph[name] = found
    return graph


def closure(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module importing ``start`` names or runs, in the package or outside it."""
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


def broken_rule(
    graph: Mapping[str, set[str]], runtime: Mapping[str, set[str]], layer: str, never: list[str]
) -> dict[str, list[str]]:
    """What the modules of ``layer`` reach against the rule ``never``: a Legato layer
    through any import (``TYPE_CHECKING`` ones included: the design), a third-party
    package through the imports that run (what importing the layer loads)."""
    ours = [n for n in never if _under(n, ["legato"])]
    theirs = [n for n in never if n not in ours]
    found = violations(graph, layer, ours)
    for module, bad in violations(runtime, layer, theirs).items():
        found[module] = sorted([*found.get(module, []), *bad])
    return found


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (its strongly connected components of more than
    one module), each sorted; a package ``__init__`` importing its own submodules is not
    one (importing a submodule runs its package first, which is no dependency)."""
    edges = {
        m: {i for i in imported if i in graph and not _under(m, [i])}
        for m, imported in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(edges[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def rooms(graph: Mapping[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph between the children of ``package``: each subpackage (a folder) and
    each module directly in it is one room, holding everything under it."""

    def room(module: str) -> str | None:
        if not _under(module, [package]) or module == package:
            return None
        return ".".join(module.split(".")[: package.count(".") + 2])

    between: dict[str, set[str]] = {}
    for module, imported in graph.items():
        here = room(module)
        if here is None:
            continue
        there = {room(i) for i in imported} - {None, here}
        between.setdefault(here, set()).update(r for r in there if r is not None)
    return between


def architecture_rules(text: str) -> list[tuple[str, list[str]]]:
    """The "Rules" table of docs/architecture.md: (layer, what it never imports), one
    pair per layer a row names."""
    section = text.split("\n### Rules\n", 1)[1].split("\n#", 1)[0]
    rules: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        layers, never = (re.findall(r"`([\w.]+)`", cell) for cell in cells)
        rules.extend((layer, never) for layer in layers)
    return rules


GRAPH = module_imports(PACKAGE_ROOT)
RUNTIME = module_imports(PACKAGE_ROOT, typed=False)
RULES = architecture_rules(ARCHITECTURE.read_text())
# The arrows between folders that run back up, each named and justified in
# docs/architecture.md ("Rules"): without them the folders form layers.
BACK_ARROWS = {
    ("legato.engine.repositories.runs", "legato.engine.transport.driver"),
    ("legato.engine.repositories.signals", "legato.engine.transport.driver"),
}


def test_the_scan_sees_the_package() -> None:
    # A scan that found nothing would pass every rule below.
    assert {DECIDER, f"{DECIDER}.decide", f"{REPOSITORIES}.runs", "legato.schema.tables"} <= set(
        GRAPH
    )
    assert "sqlalchemy" in closure(GRAPH, "legato.schema.tables")
    assert f"{REPOSITORIES}.runs" in closure(GRAPH, "legato.engine.loops.decider")
    # TYPE_CHECKING imports count: the task context names SQLAlchemy's connection so.
    assert "sqlalchemy" in GRAPH["legato.context"]
    # A name imported from a lazy face depends on the module that defines it.
    assert "legato.schema.tables" in GRAPH[f"{REPOSITORIES}.runs"]
    assert "legato.schema.tables" not in GRAPH["legato.schema"]
    # The rules were read, and name only layers that exist: a folder or a module.
    assert len(RULES) >= 10
    assert [layer for layer, _ in RULES if layer not in GRAPH] == []


def test_no_import_circles() -> None:
    assert circles(GRAPH) == []


# Every package folder of the tree, found on disk: a new folder is checked as it lands.
PACKAGES = sorted(
    ".".join(path.parent.relative_to(REPO_ROOT).parts) for path in PACKAGE_ROOT.rglob("__init__.py")
)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_circles_between_folders(package: str) -> None:
    # Each folder and each module of ``package`` as one room: the rooms form layers, so
    # no import runs back up from a lower one to a higher one but the named ones.
    without = {
        m: imported
        - {p for a, b in BACK_ARROWS if a == m for p in _with_parents(b) if not _under(a, [p])}
        for m, imported in GRAPH.items()
    }
    assert circles(rooms(without, package)) == []


def test_the_arrows_back_up_are_named() -> None:
    text = ARCHITECTURE.read_text()
    assert len(BACK_ARROWS) <= 2  # the design's budget: more is a layer in the wrong place
    assert all(a in GRAPH and b in GRAPH[a] for a, b in BACK_ARROWS)  # each still exists
    named = {(a.split(".")[-1], b.split(".")[-1]) for a, b in BACK_ARROWS}
    assert [pair for pair in named if f"`{pair[0]}` → `{pair[1]}`" not in text] == []


@pytest.mark.parametrize(("layer", "never"), RULES, ids=[layer for layer, _ in RULES])
def test_layer_does_not_reach_upwards(layer: str, never: list[str]) -> None:
    assert broken_rule(GRAPH, RUNTIME, layer, never) == {}


def test_every_folder_is_on_the_map() -> None:
    # A new package folder is placed in docs/architecture.md's code map before it lands.
    text = ARCHITECTURE.read_text()
    packages = sorted(
        ".".join(path.parent.relative_to(REPO_ROOT).parts)
        for path in PACKAGE_ROOT.rglob("__init__.py")
        if path.parent.parent in (PACKAGE_ROOT, PACKAGE_ROOT / "engine")
    )
    assert [p for p in packages if f"`{p}`" not in text] == []


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
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n"
    )
    (package / "low" / "pure.py").write_text("def f() -> None:\n    from pkg.high import db\n")
    graph = module_imports(package)
    assert violations(graph, "pkg.low", ["sqlalchemy"]) == {
        "pkg.low.pure": ["sqlalchemy"],
        "pkg.low.typed": ["sqlalchemy"],
    }
    assert violations(graph, "pkg.low", ["pkg.high"]) == {
        "pkg.low.pure": ["pkg.high", "pkg.high.db"],
        "pkg.low.typed": ["pkg.high"],
    }
    (package / "high" / "db.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import typed\n"
    )
    (package / "low" / "typed.py").write_text("import pkg.high.db\n")
    assert circles(module_imports(package)) == [["pkg.high.db", "pkg.low.typed"]]


def _planted(tmp_path: Path, module: str, line: str) -> Path:
    """A scratch copy of the package with ``line`` added to ``module``."""
    copy = tmp_path / "legato"
    shutil.copytree(PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy.joinpath(*module.split(".")[1:]).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}\n")
    return copy


@pytest.mark.parametrize(
    ("module", "line", "layer"),
    [
        # The schema below the repositories, even for the type checker only.
        (
            "legato.schema.types",
            "if TYPE_CHECKING:\n    from legato.engine.repositories import runs",
            "legato.schema",
        ),
        # The errors import nothing from the engine, not even a deferred import.
        ("legato.errors", "def f() -> None:\n    from legato.engine import hooks", "legato.errors"),
        # The engine never imports the client.
        ("legato.engine.reports", "from legato.client import Client", "legato.engine"),
        # The decider never loads SQLAlchemy, through the schema's face either.
        ("legato.engine.decider.state", "from legato.schema import Runs", DECIDER),
    ],
)
def test_a_planted_import_breaks_a_rule(tmp_path: Path, module: str, line: str, layer: str) -> None:
    assert all(broken_rule(GRAPH, RUNTIME, rule, never) == {} for rule, never in RULES)
    copy = _planted(tmp_path, module, line)
    graph, runtime = module_imports(copy), module_imports(copy, typed=False)
    broken = {rule for rule, never in RULES if broken_rule(graph, runtime, rule, never)}
    assert layer in broken
    assert module in broken_rule(graph, runtime, layer, dict(RULES)[layer])


def test_a_planted_import_closes_a_circle(tmp_path: Path) -> None:
    copy = _planted(
        tmp_path, "legato.errors", "if TYPE_CHECKING:\n    from legato.models import Run"
    )
    graph = module_imports(copy)
    assert circles(graph) != []
    assert circles(rooms(graph, "legato")) != []


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


def test_the_hand_off_does_not_import_the_worker() -> None:
    # The hand-off and the worker know each other only through the protocols of
    # legato.engine.transport.handoff: no import circle, not even for the type checker.
    assert "legato.engine.loops.worker" not in closure(GRAPH, "legato.engine.transport.handoff")


def test_the_testing_package_reaches_the_loops_only_through_the_runtime() -> None:
    # The simulator shares the loops' pure rules (legato.engine.attempts,
    # legato.engine.timer_semantics), never the loops themselves. The pytest plugin's
    # legato_runtime fixture is a real Runtime: it reaches the loops through it alone.
    found = violations(GRAPH, "legato.testing", ["legato.engine.loops"])
    assert set(found) <= {"legato.testing.plugin"}
    assert not any(_under(m, ["legato.engine.loops"]) for m in GRAPH["legato.testing.plugin"])
    assert "legato.testing.simulator" in GRAPH  # the rule looked at the simulator
