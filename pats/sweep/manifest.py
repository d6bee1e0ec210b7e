"""A sweep folder's `sweep.json`: the cells sweeps planned there, every path relative to the folder, so
the folder can be copied, moved or committed and still be read (`pats compare`, `pats sweep status`).

Format 2 (issue 49): `{"format": 2, "name": ..., "cells": [{"name", "condition", "seed", "spec",
"overrides", "run_dir"}]}`; `run_dir` is the cell's folder (its name) and `spec` its spec file, both
relative to the sweep folder; the overrides leave out `logging.root` (the folder the cell sits in).
Format 1 (pats before issue 49) held absolute `spec` and `run_dir` paths and `logging.root=...` among
the overrides; it is read by each cell's folder name under the sweep folder, never at its absolute path.

A rerun of a sweep writes the manifest after it has checked every cell: a row per cell it planned and
accepted, the old row of a cell it refused (its folder holds another spec's run, which that row
describes), and the old rows of cells it did not plan whose folders are still there. A rerun that
refuses every cell leaves the manifest as it was.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

from pydantic import ValidationError

from pats.errors import PrerequisiteError
from pats.fileio import write_atomic
from pats.types import Record

MANIFEST = "sweep.json"
FORMAT = 2


class ManifestCell(Record):
    name: str
    condition: str
    seed: int
    spec: str  # the spec file: relative to the sweep folder (format 1: absolute)
    overrides: tuple[str, ...]
    run_dir: str  # the cell's folder: its name (format 1: an absolute path, of which only the name counts)

    @property
    def folder(self) -> str:
        """The cell's folder name under the sweep folder, whichever format wrote the row."""
        return Path(self.run_dir).name


class Manifest(Record):
    format: int = 1  # format 1 files have no such key
    name: str
    cells: tuple[ManifestCell, ...]


def read_manifest(folder: Path) -> Manifest | None:
    """The folder's manifest; None when it has none."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as err:
        raise PrerequisiteError(
            f"{path} is not a sweep manifest this version of pats can read ({err.error_count()} problems, "
            f"first: {err.errors()[0]['msg']}); move it aside and rerun the sweep's command to write a new one"
        ) from None
    if manifest.format > FORMAT:
        raise PrerequisiteError(f"{path} was written by a newer pats (format {manifest.format}); update pats")
    return manifest


def row(
    folder: Path, name: str, condition: str, seed: int, spec: str, overrides: Sequence[str]
) -> ManifestCell:
    """A format-2 row: the spec file relative to the sweep folder, `logging.root=` left out."""
    kept = tuple(o for o in overrides if o.partition("=")[0].strip() != "logging.root")
    return ManifestCell(
        name=name,
        condition=condition,
        seed=seed,
        spec=os.path.relpath(os.path.abspath(spec), folder),
        overrides=kept,
        run_dir=name,
    )


def _current(folder: Path, old: ManifestCell) -> ManifestCell:
    """An old row in format 2 (a format-1 row's absolute paths made relative)."""
    if not Path(old.run_dir).is_absolute():
        return old
    return row(folder, old.name, old.condition, old.seed, old.spec, old.overrides)


def write_manifest(
    folder: Path, name: str, planned: Sequence[ManifestCell], refused: Collection[str]
) -> bool:
    """Write the manifest after the cells were checked (see the module's docstring); False when it was
    left as it was (every planned cell refused)."""
    old = read_manifest(folder)
    if refused and all(c.name in refused for c in planned):
        return False
    before = {c.name: _current(folder, c) for c in old.cells} if old else {}
    rows = [
        c if c.name not in refused else before[c.name]
        for c in planned
        if c.name not in refused or c.name in before
    ]
    named = {c.name for c in rows}
    rows += [c for c in before.values() if c.name not in named and (folder / c.folder).is_dir()]
    folder.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(format=FORMAT, name=name, cells=tuple(rows))
    write_atomic(folder / MANIFEST, manifest.model_dump_json(indent=1))
    return True


def cell_dirs(folder: Path) -> list[Path]:
    """The run directories of the sweep at `folder`, found by name under it (never elsewhere): those of
    its manifest's cells that hold a run (a cell not started has no spec.yaml yet). Refused, with what to
    do, where the manifest names cells the folder does not hold (copied or moved without them)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise PrerequisiteError(f"{folder} holds no {MANIFEST}: it is not a sweep folder")
    missing = [c for c in manifest.cells if not (folder / c.folder).is_dir() and not not_started(folder, c)]
    if missing:
        names = ", ".join(c.folder for c in missing[:10]) + (
            f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        )
        raise PrerequisiteError(
            f"{folder / MANIFEST} names {len(missing)} of its {len(manifest.cells)} cells that are not in "
            f"{folder}: {names} (was the folder copied or moved without them?). Copy those cell folders "
            f"beside the others, or compare the cells that are there by naming them: pats compare "
            f"{folder}/CELL ..."
        )
    return [folder / c.folder for c in manifest.cells if (folder / c.folder / "spec.yaml").is_file()]


def not_started(folder: Path, cell: ManifestCell) -> bool:
    """A format-1 row written for this very folder whose cell has no folder: that pats made a cell's
    folder only when the cell started, so it has not started yet. (Format 2 makes every cell's folder,
    with its status, before any cell runs: a missing one is missing.)"""
    run_dir = Path(cell.run_dir)
    return run_dir.is_absolute() and run_dir.parent.resolve() == folder.resolve()
