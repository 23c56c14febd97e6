"""fleet's import graph at run time has no cycle, and the lower rooms never import the upper ones.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from … import`` of a ``fleet`` module, at module level and inside functions and classes alike,
since a function-level import still runs, only later. Imports under ``if TYPE_CHECKING:`` are left
out (they never run; their ``else:`` branch does and counts); a second check counts them too.
Dynamic imports (``importlib.import_module``, entry points) are not seen.

How packages count: importing ``fleet.a.b`` runs ``fleet/a/__init__.py`` first, so it is an edge
to ``fleet.a.b`` and to each package above it (``fleet.a``) — except the packages that contain the
importing module itself: those are already being initialised when it runs, so a package's
``__init__`` that re-exports its own submodules is no cycle. A package named explicitly
(``from fleet.a import name`` where ``name`` is no submodule, ``import fleet.a``) is an edge
even from inside it: the importer reads what the ``__init__`` defines. So ``fleet/__init__.py``
(which loads the SDK on first use) is an edge only for ``from fleet import <a name>``: fleet's
own modules read the version from ``fleet.version`` instead.

A cycle is reported as one chain of modules per knot (strongly connected component); a wall
breach as the shortest chain from the lower module to the upper room.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGE = "fleet"

#: The rooms below the HTTP API, the CLI and the SDK: they never import those (even through
#: another module: the check follows the graph).
LOWER = (
    "fleet.a2a",
    "fleet.agents",
    "fleet.config",
    "fleet.delivery",
    "fleet.dispatch",
    "fleet.domain",
    "fleet.memory",
    "fleet.recall",
    "fleet.runtime",
    "fleet.store",
    "fleet.views",
)
UPPER = ("fleet.api", "fleet.cli", "fleet.sdk")
#: Each room and the rooms it must never reach.
WALLS = {
    **{room: UPPER for room in LOWER},
    "fleet.api": ("fleet.cli", "fleet.sdk"),
    "fleet.sdk": ("fleet.api", "fleet.cli"),
}

Graph = dict[str, set[str]]


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    tree: ast.AST, *, type_checking: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs: anywhere in the tree except under ``if TYPE_CHECKING``
    (``type_checking``: those too, as a reader and a type checker follow them)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _named(
    module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]
) -> set[str]:
    """The fleet modules an import statement names (submodules imported by name included)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:  # relative: from the importer's package
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    if source not in known:
        return set()
    names = {f"{source}.{a.name}" for a in node.names} & known
    # names that are not submodules are read from the package (or module) itself
    if len(names) < len(node.names):
        names.add(source)
    return names


def build_graph(root: Path = ROOT, *, type_checking: bool = False) -> Graph:
    """Module → the fleet modules whose code runs when it is imported (see the docstring);
    ``type_checking``: with the imports under ``if TYPE_CHECKING`` too."""
    modules = _modules(root)
    known = set(modules)
    graph: Graph = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        own = {module, *_ancestors(module)} if is_package else set(_ancestors(module))
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in _import_nodes(tree, type_checking=type_checking):
            for target in _named(module, is_package, node, known):
                edges.add(target)
                edges.update(a for a in _ancestors(target) if a not in own and a in known)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, as a chain that
    starts and ends on the same module."""
    return [_chain(graph, component) for component in knots(graph)]


def knots(graph: Graph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def _chain(graph: Graph, component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first, inside it)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")  # pragma: no cover


def path_between(graph: Graph, start: str, goals: tuple[str, ...]) -> list[str] | None:
    """A shortest import chain from ``start`` to a module in one of ``goals`` (or None)."""

    def reached(name: str) -> bool:
        return any(name == g or name.startswith(g + ".") for g in goals)

    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child in came_from:
                    continue
                came_from[child] = node
                if reached(child):
                    chain = [child]
                    while (previous := came_from[chain[-1]]) is not None:
                        chain.append(previous)
                    return list(reversed(chain))
                following.append(child)
        frontier = following
    return None


def _in(name: str, rooms: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in rooms)


# -- the checks ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_no_import_cycle(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "import cycles at run time (one chain per knot; cut one, run again):\n" + (
        "\n".join(" → ".join(c) for c in found)
    )


def test_no_import_cycle_even_for_type_checking() -> None:
    """Imports under ``if TYPE_CHECKING`` count too: a reader and a type checker follow them
    (the dispatcher's rooms name narrow protocols of it, ``fleet.dispatch.host``)."""
    found = cycles(build_graph(type_checking=True))
    assert not found, "import cycles through TYPE_CHECKING imports:\n" + "\n".join(
        " → ".join(c) for c in found
    )


@pytest.mark.parametrize("room", sorted(WALLS))
def test_rooms_never_reach_the_rooms_above_them(graph: Graph, room: str) -> None:
    above = WALLS[room]
    upward = {}
    for module in sorted(m for m in graph if _in(m, (room,))):
        chain = path_between(graph, module, above)
        if chain is not None:
            upward[module] = chain
    assert not upward, f"{room} imports {', '.join(above)}:\n" + "\n".join(
        " → ".join(chain) for chain in upward.values()
    )


# -- the graph builder itself -------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return build_graph(tmp_path)


def test_builder_counts_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "fleet/__init__.py": "",
            "fleet/a.py": "def f():\n    from fleet import b\n",
            "fleet/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from fleet import a\nelse:\n    import fleet.c\n"
            ),
            "fleet/c.py": "from . import a\n",
        },
    )
    assert graph["fleet.a"] == {"fleet.b"}
    assert graph["fleet.b"] == {"fleet.c"}
    assert graph["fleet.c"] == {"fleet.a"}
    assert cycles(graph) == [["fleet.a", "fleet.b", "fleet.c", "fleet.a"]]


def test_builder_counts_parent_packages_but_not_the_importers_own(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "fleet/__init__.py": "",
            "fleet/p/__init__.py": "from fleet.p.x import X\n",
            "fleet/p/x.py": "from fleet.p.y import Y\nX = 1\n",
            "fleet/p/y.py": "Y = 2\n",
            "fleet/q.py": "from fleet.p.y import Y\n",
            "fleet/r.py": "from fleet.p import X\n",
        },
    )
    assert graph["fleet.p"] == {"fleet.p.x"}
    assert graph["fleet.p.x"] == {"fleet.p.y"}  # its own package is already being imported
    assert graph["fleet.q"] == {"fleet.p", "fleet.p.y"}  # fleet/p/__init__ runs first
    assert graph["fleet.r"] == {"fleet.p"}
    assert cycles(graph) == []
    assert path_between(graph, "fleet.q", ("fleet.p.x",)) == ["fleet.q", "fleet.p", "fleet.p.x"]
