"""bench/ grouped by purpose (issue 50): perf/ (speed and memory) and studies/ (the experiments behind
the docs) beside one module of shared helpers; no import cycle between its modules; every study says
its question, its command and its result files; nothing in it that the package does (statistics come
from pats.stats, the reviser benchmark is `pats reviser bench`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
STUDIES = sorted((BENCH / "studies").glob("*.py"))


def modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(BENCH.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in BENCH.rglob("*.py")
        if "results" not in p.relative_to(BENCH).parts
    }


def test_bench_holds_perf_studies_and_one_shared_module():
    top = {p.name for p in BENCH.iterdir() if not p.name.startswith((".", "__pycache__"))} - {"runs"}
    assert top == {"__init__.py", "common.py", "perf", "studies", "results"}, top
    assert (BENCH / "perf" / "__init__.py").is_file() and (BENCH / "studies" / "__init__.py").is_file()


def test_no_import_cycle_between_bench_modules():
    """Imports inside functions count too: bench/reviser.py <-> bench/reviser_checks.py was one."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in known and t != name}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = [name for name in graph if name in reach(name)]
    assert cycles == [], f"modules on an import cycle: {cycles}"
    assert not any(t.startswith("bench.studies") for t in graph["bench.common"]), "common is below both"


@pytest.mark.parametrize("path", [p for p in STUDIES if "__main__" in p.read_text()], ids=lambda p: p.stem)
def test_each_study_names_its_question_command_and_result_files(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first_paragraph = doc.split("\n\n")[0]
    assert "?" in first_paragraph, f"{path.name}: the docstring's first paragraph asks the study's question"
    assert f"python bench/studies/{path.name}" in doc, f"{path.name}: the docstring shows its command"
    assert "bench/results/" in doc, f"{path.name}: the docstring names the result files it writes"


def test_bench_defines_nothing_the_package_does():
    """No statistics of its own (pats.stats), no reviser bundles or scores (pats.reviser)."""
    import pats.reviser.bench
    import pats.reviser.bundles
    import pats.reviser.score
    import pats.stats

    package = {
        name
        for module in (pats.stats, pats.reviser.bench, pats.reviser.bundles, pats.reviser.score)
        for name, value in vars(module).items()
        if getattr(value, "__module__", None) == module.__name__ and not name.startswith("_")
    }
    package -= {"run", "summarize", "result", "meta", "load"}  # generic verbs bench scripts also use
    defined = {
        f"{path.relative_to(BENCH)}: {node.name}"
        for path in modules().values()
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in package
    }
    assert defined == set(), f"defined in bench/ and in the package: {sorted(defined)}"
    assert not any(re.search(r"^(from|import) stats\b", p.read_text(), re.M) for p in modules().values())
