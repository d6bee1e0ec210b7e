"""Dependencies go one way: no cycle between pats' packages (imports inside functions included), and
no backend imports the local engine (issue 15)."""

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


def package_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pats"):
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in (t for t in targets if t in mods and package(t) != package(name)):
                graph[package(name)].add(package(target))
    return graph


def test_no_cycle_between_packages():
    graph = package_graph()
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*path, nxt])
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_backends_never_import_the_engine():
    graph = package_graph()
    assert {b for b in graph if b.startswith("pats.backends") and "pats.engine" in graph[b]} == set()
    assert "pats.backends.local" in graph and graph["pats.backends.verl"], "the graph reads the backends"
