"""A sweep folder's sweep.json (pats.sweep.manifest) read, rewritten and resolved on its own, from
the mutation run of manifest.py: the refusals whole, old rows kept as they were or made relative,
a rerun whose every cell is refused leaving the file as it was, and the missing cells named (ten,
then a count)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pats.errors import PrerequisiteError
from pats.sweep.manifest import MANIFEST, ManifestCell, cell_dirs, read_manifest, write_manifest


def cell(name: str, spec: str = "../specs/a.yaml", run_dir: str | None = None) -> ManifestCell:
    return ManifestCell(
        name=name, condition="a", seed=0, spec=spec, overrides=("x=1",), run_dir=run_dir or name
    )


def test_a_manifest_pats_cannot_read_is_refused_whole(tmp_path):
    path = tmp_path / MANIFEST
    path.write_text(json.dumps({"name": 1, "cells": 5}))
    with pytest.raises(PrerequisiteError) as err:
        read_manifest(tmp_path)
    assert str(err.value) == (
        f"{path} is not a sweep manifest this version of pats can read (2 problems, first: Input should "
        "be a valid string); move it aside and rerun the sweep's command to write a new one"
    )
    path.write_text(json.dumps({"format": 3, "name": "x", "cells": []}))
    with pytest.raises(PrerequisiteError) as err:
        read_manifest(tmp_path)
    assert str(err.value) == f"{path} was written by a newer pats (format 3); update pats"
    path.write_text(json.dumps({"name": "x", "cells": []}))  # pats before issue 49 wrote no format
    assert read_manifest(tmp_path).format == 1
    assert read_manifest(tmp_path / "elsewhere") is None


def test_a_rerun_keeps_old_rows_as_they_were_and_makes_format_1_rows_relative(tmp_path):
    folder = tmp_path / "sweep"
    (folder / "old").mkdir(parents=True)
    (folder / "older").mkdir()
    rows = [
        cell("old", spec="../../elsewhere/spec.yaml"),
        cell("older", spec="/abs/b.yaml", run_dir="/was/here/older"),
    ]
    (folder / MANIFEST).write_text(json.dumps({"name": "sweep", "cells": [r.model_dump() for r in rows]}))
    assert write_manifest(folder, "sweep", [cell("new")], refused=()) is True
    written = read_manifest(folder)
    assert written.format == 2
    assert [c.name for c in written.cells] == ["new", "old", "older"]
    assert written.cells[1] == rows[0]  # a relative row is not recomputed (its spec path is the folder's)
    older = written.cells[2]
    assert (older.run_dir, Path(older.spec).is_absolute()) == ("older", False)
    assert (folder / older.spec).resolve() == Path("/abs/b.yaml")
    assert (folder / MANIFEST).read_text() == written.model_dump_json(indent=1)


def test_refused_cells_keep_their_old_rows_and_a_rerun_refusing_every_cell_writes_nothing(tmp_path):
    folder = tmp_path / "sweep"
    write_manifest(folder, "sweep", [cell("a", spec="first.yaml"), cell("b", spec="first.yaml")], refused=())
    before = (folder / MANIFEST).read_text()
    assert write_manifest(folder, "sweep", [cell("a", spec="second.yaml")], refused={"a"}) is False
    assert (folder / MANIFEST).read_text() == before
    # one refused (its old row stays), one accepted, one refused that had no row (left out)
    planned = [cell("a", spec="second.yaml"), cell("b", spec="second.yaml"), cell("c", spec="second.yaml")]
    assert write_manifest(folder, "sweep", planned, refused={"a", "c"}) is True
    assert [(c.name, c.spec) for c in read_manifest(folder).cells] == [
        ("a", "first.yaml"),
        ("b", "second.yaml"),
    ]


@pytest.mark.parametrize(("missing", "said"), [(10, ""), (11, " and 1 more"), (12, " and 2 more")])
def test_missing_cells_are_named_ten_then_counted(tmp_path, missing, said):
    folder = tmp_path / "sweep"
    names = [f"c{i:02d}" for i in range(missing + 1)]
    write_manifest(folder, "sweep", [cell(n) for n in names], refused=())
    (folder / names[-1]).mkdir()  # the one cell that is there
    with pytest.raises(PrerequisiteError) as err:
        cell_dirs(folder)
    assert str(err.value) == (
        f"{folder / MANIFEST} names {missing} of its {missing + 1} cells that are not in {folder}: "
        f"{', '.join(names[:10])}{said} (was the folder copied or moved without them?). Copy those cell "
        f"folders beside the others, or compare the cells that are there by naming them: pats compare "
        f"{folder}/CELL ..."
    )


def test_a_folder_without_a_manifest_is_not_a_sweep(tmp_path):
    with pytest.raises(PrerequisiteError) as err:
        cell_dirs(tmp_path)
    assert str(err.value) == f"{tmp_path} holds no {MANIFEST}: it is not a sweep folder"
