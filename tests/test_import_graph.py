"""Dependencies go one way: no cycle between pats' packages nor between the modules inside one
(imports inside functions and under TYPE_CHECKING included), and no backend imports the local engine
(issue 15)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PATS = Path(__file__).resolve().parents[1] / "pats"


def modules() -> dict[str, Path]:
    out = {}
    for path in PATS.rglob("*.py"):
        name = ".".join(path.relative_to(PATS.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def package(module: str) -> str:
    """pats.<sub> (pats.backends.<name> for the backends): the unit a cycle is counted between."""
    parts = module.split(".")
    return ".".join(parts[:3] if len(parts) > 2 and parts[1] == "backends" else parts[:2])


def module_graph() -> dict[str, set[str]]:
    """module -> the pats modules it imports. `from pkg import name` counts as an import of the module
    pkg.name where there is one, else of pkg (its __init__)."""
    mods = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pats"):
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, targets in module_graph().items():
        graph[package(name)] |= {package(t) for t in targets if package(t) != package(name)}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, or None."""
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def test_no_cycle_between_packages():
    found = cycle(package_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


# Edges left out of the module check until their owner breaks the circle, each with its reason.
KNOWN: set[tuple[str, str]] = set()


def test_no_cycle_between_modules():
    graph = module_graph()
    for a, b in KNOWN:
        assert b in graph[a], f"{a} no longer imports {b}: remove the pair from KNOWN"
        graph[a] = graph[a] - {b}
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_a_cycle_is_found():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_backends_never_import_the_engine():
    graph = package_graph()
    assert {b for b in graph if b.startswith("pats.backends") and "pats.engine" in graph[b]} == set()
    assert "pats.backends.local" in graph and graph["pats.backends.verl"], "the graph reads the backends"
