"""The package's shape stays true: imports only go down the spine, and nothing imports in a cycle.

The import graph is read from the sources (``ast``), so imports inside functions and under
``TYPE_CHECKING`` count as much as those at the top of a module: a cycle hidden by a late import
is still a cycle. ``docs/architecture.md`` draws the layers :data:`LAYERS` lists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import meshtune

SRC = Path(meshtune.__file__).resolve().parent

LAYERS: tuple[str, ...] = (
    # The foundation: no meshtune imports beyond each other.
    "_version",
    "errors",
    "units",
    "io",
    "_toml",
    "_lazy",
    "ranks",
    "partition",
    # What is trained, on what; the catalogs of both; logs fitted into profiles.
    "model",
    "hardware",
    "catalog",
    "calibrate",
    # Phase 1, the pure costs, the virtual mesh, and the registry that names them.
    "dataflow",
    "cost",
    "executor",
    "algorithms",
    # The step model, the search over it, the plan file, the planner.
    "step",
    "search",
    "plan",
    "planner",
    # What users do with a plan.
    "verify",
    "timeline",
    "compare",
    "validation",
    "engines",
    "export",
    "report",
    "cli",
    "__init__",
    "__main__",
)
"""The package's units (a subpackage or a root module), lowest first: a unit imports only
units listed before it (and itself)."""


def module_name(path: Path) -> str:
    """``meshtune.a.b`` of a source file (a package's ``__init__`` is the package)."""
    parts = ("meshtune", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The layer a module belongs to: its subpackage or root module under ``meshtune``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def import_graph() -> dict[str, set[str]]:
    """Every meshtune module → the meshtune modules it imports (``from p import m`` of a
    submodule ``m`` counts as importing ``p.m``)."""
    modules = {module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != "meshtune":
                    continue
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[name].add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name.split(".")[0] == "meshtune")
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{name}: relative import; meshtune imports absolutely")
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e in graph), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == []  # a module naming itself is no cycle


def test_every_unit_has_a_layer() -> None:
    units = {unit(name) for name in import_graph()}
    assert units - set(LAYERS) == set(), "place the new unit in LAYERS and docs/architecture.md"
    assert set(LAYERS) - units == set(), "a unit in LAYERS no longer exists"


def test_imports_only_go_down() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(
        f"{source} imports {target}"
        for source, targets in import_graph().items()
        for target in targets
        if target in rank or unit(target) in rank
        if rank[unit(target)] > rank[unit(source)]
    )
    assert upward == []
