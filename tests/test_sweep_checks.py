"""Where `pats sweep` takes a cell to stand before any cell runs (pats/sweep/checks.py): start, resume or
refused, and what "another spec" is: the resolved spec's keys, where the cell ran aside (issue 49)."""

from __future__ import annotations

import pytest

from pats.errors import SpecNotice
from pats.logging.events import EventLog
from pats.spec import load_spec, spec_to_yaml
from pats.sweep import SweepSpec, cells
from pats.sweep.checks import check_cell, spec_difference


def one_cell(repo, root, *overrides: str):
    sweep = SweepSpec(
        name="one", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0,), root=str(root),
        overrides=("trainer.steps=3", *overrides),
    )  # fmt: skip
    (cell,) = cells(sweep)
    return cell


def saved(cell, *overrides: str):
    """The cell's folder with a spec.yaml of its spec, `overrides` applied on top."""
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(cell.source, [*cell.overrides, *overrides]) if overrides else cell.spec
    path = cell.run_dir / "spec.yaml"
    path.write_text(spec_to_yaml(spec), encoding="utf-8")
    return path


def test_a_cell_starts_resumes_is_finished_or_is_refused_by_its_folder(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    assert check_cell(cell) == ("start", "")  # no folder yet
    saved(cell)
    assert check_cell(cell) == ("start", "")  # died before its first checkpoint: starts over
    (cell.run_dir / "checkpoints").mkdir()
    (cell.run_dir / "checkpoints" / "latest.json").write_text("{}")
    assert check_cell(cell) == ("resume", "")
    log = EventLog(cell.run_dir / "events.jsonl")
    for step in range(3):
        log.end_step(step, metrics={})
    log.close()
    (cell.run_dir / "checkpoints" / "latest.json").unlink()  # no pats checkpoint: its log alone decides
    assert check_cell(cell) == ("finished", "")
    (cell.run_dir / "events.jsonl").unlink()
    saved(cell, "trainer.lr=0.5")
    assert check_cell(cell) == (
        "refused",
        f"{cell.run_dir} holds a run of another spec than this cell's (trainer.lr: 0.5 there, "
        f"{cell.spec.trainer.lr} here: the sweep's specs or overrides changed); undo that change to go on "
        "with this sweep, or give the sweep another --name to run the changed cells beside it (or remove "
        "that folder to rerun the cell)",
    )
    log = EventLog(cell.run_dir / "events.jsonl")
    for step in range(3):  # finished, under another spec: still refused (issue 59, item 1)
        log.end_step(step, metrics={})
    log.close()
    assert check_cell(cell)[0] == "refused"


def test_where_a_cell_ran_is_not_another_spec_and_past_three_keys_the_rest_are_counted(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    path = saved(cell, f"logging.root={tmp_path / 'elsewhere'}", "trainer.threads=3")
    assert spec_difference(path, cell.spec) == ""
    path = saved(cell, "logging.root=runs/elsewhere")  # not even a path that moved with the folder
    assert spec_difference(path, cell.spec) == ""
    path = saved(cell, "trainer.lr=0.5", "seed=7", "trainer.steps=9", "eval.every=2")
    lr = cell.spec.trainer.lr
    assert spec_difference(path, cell.spec) == (
        f"eval.every: 2 there, {cell.spec.eval.every} here; seed: 7 there, 0 here; trainer.lr: 0.5 there, "
        f"{lr} here; and 1 more"
    )
    path = saved(cell, "trainer.lr=0.5", "seed=7", "trainer.steps=9")
    assert spec_difference(path, cell.spec).endswith("trainer.steps: 9 there, 3 here")  # three: none counted


def test_a_spec_yaml_that_does_not_load_is_another_spec_with_the_reason(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    path = saved(cell)
    path.write_text("trainer:\n  stepz: 3\n", encoding="utf-8")
    assert spec_difference(path, cell.spec) == f"its spec.yaml does not load: {path}: 3 problems in the spec"
    assert check_cell(cell)[0] == "refused"


def test_keys_only_one_side_has_are_named_unset(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    with pytest.warns(SpecNotice):  # another kind of environment: other keys
        path = saved(cell, "environment.kind=alfworld")
    why = spec_difference(path, cell.spec)
    assert ", (unset) here" in why and ": (unset) there, " in why


def test_a_path_that_moved_with_the_sweep_folder_is_the_same_path(repo, tmp_path):
    """A clone at another path: spec.yaml holds the absolute paths of the machine that wrote it (the
    warm start's adapter beside the sweep folder); where each sits relative to its cell's folder is what
    names the same file. A path that moved otherwise is another spec."""
    cell = one_cell(repo, tmp_path / "here" / "sweeps", f"policy.init_adapter={tmp_path / 'here/adapter'}",
                    "policy.lora.rank=8")  # fmt: skip
    there = tmp_path / "there"
    path = saved(cell, f"logging.root={there / 'sweeps/one'}", f"policy.init_adapter={there / 'adapter'}")
    assert spec_difference(path, cell.spec) == ""
    path = saved(cell, f"logging.root={there / 'sweeps/one'}", f"policy.init_adapter={there / 'other'}")
    assert spec_difference(path, cell.spec) == (
        f'policy.init_adapter: "{there / "other"}" there, "{tmp_path / "here/adapter"}" here'
    )
    path = saved(cell, f"policy.init_adapter={there / 'adapter'}")  # the same folder: not moved
    assert spec_difference(path, cell.spec).startswith("policy.init_adapter: ")
