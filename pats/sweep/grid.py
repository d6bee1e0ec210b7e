"""A sweep's grid: specs x override combinations x seeds, each cell a resolved, validated spec.

A sweep comes from the command line (`pats sweep SPEC... --seeds 0-3 KEY=VALUE... KEY=a,b`; the grid
syntax is pats.sweep.multirun's) or from a YAML file whose one top-level key is `sweep:` (`SweepSpec`'s
fields; its spec paths and its `root:` relative to that file), for grids too large to type. Every cell
is loaded and validated before anything runs, and every problem of every cell is reported at once.

Names: a cell's condition is its spec's `name` (after the overrides), with `-<key><value>` per grid
value when the sweep has a grid; its run is `<condition>-s<seed>` in `<root>/<sweep name>/`. Each cell
gets `seed`, `name`, `logging.root` and `logging.group` (the sweep's name: one W&B group per sweep) as
overrides after the sweep's own, so those four keys belong to the sweep; and, when cells run as Ray
tasks, `trainer.threads` (the CPUs each asks for) where its spec leaves it unset.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from pats.errors import SpecError, SpecIssue
from pats.spec.base import SpecModel
from pats.spec.models import ExperimentSpec

# Overrides the sweep sets in every cell; one of them in a sweep's own overrides or grid is refused.
OWNED = {"seed": "--seeds (or the sweep's seeds:)", "name": "the spec files' names", "logging.root": "--root",
         "logging.group": "--name (the sweep's name is the W&B group)"}  # fmt: skip


class SweepSpec(SpecModel):
    """The `sweep:` section of a sweep file (and what `pats sweep`'s arguments build)."""

    name: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_.\-]*$",
        description="Folder under root and W&B group; empty: derived from the grid.",
    )
    specs: tuple[str, ...] = Field(min_length=1, description="Experiment spec files, one condition each.")
    seeds: tuple[int, ...] = Field((0,), min_length=1, description="Every condition runs once per seed.")
    overrides: tuple[str, ...] = Field((), description="KEY=VALUE overrides applied to every cell.")
    grid: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="KEY -> values: every combination is a condition of every spec."
    )
    root: str = Field(
        "runs/sweeps",
        description="Sweeps are written to <root>/<name>/; in a sweep file relative to the file, else to "
        "the working directory.",
    )
    order: Literal["spec", "seed"] = Field(
        "spec",
        description="Which cells run first: spec, each spec's seeds before the next spec; seed, every "
        "condition of a seed before the next seed (a campaign stopped early holds paired cells).",
    )
    cpus: float = Field(1.0, gt=0, description="CPUs a cell asks of Ray (--ray).")
    gpus: float = Field(0.0, ge=0, description="GPUs a cell asks of Ray (--ray).")
    memory: float = Field(0.0, ge=0, description="GiB of memory a cell asks of Ray (--ray); 0: no ask.")


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: its condition, seed, and the resolved spec it trains."""

    condition: str
    seed: int
    spec: ExperimentSpec
    source: str  # the spec file
    overrides: tuple[str, ...]  # what was applied to it, the sweep's included

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run_dir(self) -> Path:
        return Path(self.spec.logging.root) / self.spec.name


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0-3' -> (0, 1, 2, 3); '0,2,5' and '0-1,4' as expected; refused with the form to write."""
    seeds: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise SpecError(f"--seeds {text!r}: write seeds as 0-3, 0,2,5 or 0-1,4 (ranges low-high)")
        seeds += range(int(m[1]), int(m[2] or m[1]) + 1)
    return tuple(dict.fromkeys(seeds))


def is_sweep_file(path: str | Path) -> bool:
    """A YAML file whose only top-level key is `sweep`."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and set(data) == {"sweep"}


def load_sweep_file(path: str | Path) -> SweepSpec:
    """A sweep file's section, its spec paths and its root read relative to the file's folder."""
    path = Path(path)
    section = yaml.safe_load(path.read_text(encoding="utf-8"))["sweep"]
    if not isinstance(section, dict):
        raise SpecError(
            SpecIssue("sweep", "must be a mapping of name, specs, seeds, overrides, grid, ..."),
            file=str(path),
        )
    if isinstance(section.get("specs"), list):
        section["specs"] = [os.path.normpath(path.parent / s) for s in section["specs"]]
    section.setdefault("name", path.stem)
    if isinstance(section.get("root"), str) and isinstance(section["name"], str):
        section["root"] = _file_root(path, section["root"], section["name"])
    return validated(section, str(path))


def _file_root(path: Path, root: str, name: str) -> str:
    """`root:` read relative to the sweep file. Refused where that folder does not exist and the one
    relative to the working directory (how pats read `root:` before issue 49) holds this sweep, or
    could (its parent exists where the file's has none): the sweep would otherwise start over in a
    folder nobody meant instead of continuing its cells."""
    mine = Path(os.path.normpath(path.parent / root))
    before = Path(os.path.abspath(root))
    if Path(os.path.abspath(mine)) == before or mine.exists():
        return str(mine)
    if (before / name).is_dir() or (before.parent.is_dir() and not mine.parent.exists()):
        raise SpecError(
            SpecIssue(
                "sweep.root",
                f"'{root}' is read relative to the sweep file (since issue 49; before, relative to the "
                f"working directory): it names {os.path.abspath(mine)}, which does not exist, where before "
                f"it named {before}; write root: {os.path.relpath(before, path.parent)} for the latter, or "
                "create the former first",
            ),
            file=str(path),
        )
    return str(mine)


def validated(section: dict, where: str) -> SweepSpec:
    try:
        return SweepSpec.model_validate(section)
    except ValidationError as err:
        issues = [SpecIssue("sweep." + ".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
        raise SpecError(issues, file=where) from None


def sweep_name(sweep: SweepSpec) -> str:
    """The sweep's name, or one derived from its grid (the same command gives the same folder)."""
    if sweep.name:
        return sweep.name
    key = repr((sorted(sweep.specs), sweep.seeds, sweep.overrides, sorted(sweep.grid.items())))
    return "sweep-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def _label(key: str, value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "", key.split(".")[-1] + value)


def sweep_folder(sweep: SweepSpec) -> Path:
    """<root>/<name>, absolute (and without `..`)."""
    return Path(os.path.abspath(Path(sweep.root) / sweep_name(sweep)))


def cells(sweep: SweepSpec, threads: int | None = None) -> tuple[Cell, ...]:
    """Every cell, in order: spec, then grid combination, then seed (`order: seed`: seed first); with
    `threads`, a local-backend cell whose spec leaves trainer.threads unset gets it. Raises SpecError
    with every problem of every cell."""
    from pats.spec import load_spec
    from pats.spec.models import LocalTrainerSpec

    issues = _owned_issues(sweep)
    failed: dict[SpecIssue, list[str]] = {}  # each problem (where it was set) -> the cells it is in
    folder = sweep_folder(sweep)
    keys = sorted(sweep.grid)
    combos = list(itertools.product(*(sweep.grid[k] for k in keys))) or [()]
    out: list[Cell] = []
    for source in sweep.specs:
        for combo in combos:
            varied = tuple(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
            try:
                base = load_spec(source, [*sweep.overrides, *varied])
            except SpecError as err:
                cell = " ".join([source, *varied])  # the condition has no name yet: its spec and values
                for issue in err.issues:
                    failed.setdefault(_normalized(issue), []).append(cell)
                continue
            condition = "-".join([base.name, *(_label(k, v) for k, v in zip(keys, combo, strict=True))])
            if threads and isinstance(base.trainer, LocalTrainerSpec) and base.trainer.threads is None:
                varied = (*varied, f"trainer.threads={threads}")
            for seed in sweep.seeds:
                extra = (f"seed={seed}", f"name={condition}-s{seed}", f"logging.root={folder}",
                         f"logging.group={sweep_name(sweep)}")  # fmt: skip
                overrides = (*sweep.overrides, *varied, *extra)
                out.append(Cell(condition, seed, load_spec(source, overrides), source, overrides))
    issues += [_in(issue, where) for issue, where in failed.items()]
    issues += _duplicates(out)
    if issues:  # once each: a bad override is the same problem in every cell
        raise SpecError(list(dict.fromkeys(issues)), file="pats sweep")
    if sweep.order == "seed":  # stable: within a seed, the specs' and grid's order
        out.sort(key=lambda c: sweep.seeds.index(c.seed))
    return tuple(out)


def _normalized(issue: SpecIssue) -> SpecIssue:
    """The issue with the file it names as a plain path (`experiments/ablations/../quickstart.yaml:29`,
    an include, is `experiments/quickstart.yaml:29`), so one problem reached through two specs is one."""
    path, colon, line = issue.source.rpartition(":")
    if not colon or not line.isdigit() or not path.endswith((".yaml", ".yml")):
        return issue
    return SpecIssue(issue.path, issue.message, f"{os.path.normpath(path)}:{line}")


def _in(issue: SpecIssue, cells: Sequence[str]) -> SpecIssue:
    """The issue with the cells it is in (spec file and grid values), unless it names an override (the
    same wherever it applies) or the one spec file it is in."""
    shown = ", ".join(cells[:3]) + (f" and {len(cells) - 3} more" if len(cells) > 3 else "")
    if not issue.source:
        return SpecIssue(issue.path, issue.message, shown)
    if issue.source.startswith("override ") or cells == [issue.source.rpartition(":")[0]]:
        return issue
    return SpecIssue(issue.path, issue.message, f"{issue.source}; in the cells of {shown}")


def _owned_issues(sweep: SweepSpec) -> list[SpecIssue]:
    issues = []
    for text in (*sweep.overrides, *(f"{k}=" for k in sweep.grid)):
        key = text.partition("=")[0].strip()
        for mine, instead in OWNED.items():
            if key == mine or key.startswith(mine + ".") or mine.startswith(key + "."):
                issues.append(
                    SpecIssue(key, f"is set per cell by the sweep; use {instead}", f"override '{text}'")
                )
    return issues


def _duplicates(found: Sequence[Cell]) -> list[SpecIssue]:
    seen: dict[str, str] = {}
    issues = []
    for cell in found:
        if cell.name in seen and seen[cell.name] != cell.source:
            issues.append(
                SpecIssue(
                    "name",
                    f"'{cell.condition}' is the name of both {seen[cell.name]} and {cell.source}; "
                    "give each spec its own name: (a condition is a spec's name)",
                    cell.source,
                )  # fmt: skip
            )
        elif cell.name in seen:
            issues.append(SpecIssue("specs", f"{cell.source} is given twice", "pats sweep"))
        seen.setdefault(cell.name, cell.source)
    return issues
