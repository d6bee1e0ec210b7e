"""A sweep folder is self-contained (issue 49, item 1): sweep.json's paths are relative to it, a copy
compares as the original does, and still does once the original is gone; a folder whose manifest names
cells it does not hold is refused. A folder laid out as pats wrote it before issue 49 (sweep.json with
absolute paths and `logging.root=` among the overrides, no status records, each spec.yaml with the
absolute folder it was written in) is compared, skipped and resumed by its cells' names under it, in
place and moved. Cells train with pats' own engine on FakeEnv and a scripted policy (pats.testing.sweep)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pats.cli.main import main
from pats.compare import run_dirs
from pats.logging.events import StepEndEvent, read_events
from pats.sweep import SweepSpec, cells, run_sweep
from pats.sweep.status import status_rows
from pats.testing.sweep import scripted_trainers

TINY = (
    "trainer.steps=3",
    "trainer.tasks_per_step=2",
    "trainer.checkpoint_every=1",
    "eval.every=3",
    "eval.gap_tasks=0",
    "logging.wandb=disabled",
    "logging.progress=false",
)
NAMES = ["quickstart-s0", "quickstart-s1", "quickstart-grpo-s0", "quickstart-grpo-s1"]


def two_by_two(repo: Path, root: Path) -> SweepSpec:
    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    return SweepSpec(name="tiny", specs=specs, seeds=(0, 1), overrides=TINY, root=str(root))


def compared(folder: Path, out: Path, capsys) -> tuple[str, str]:
    """`pats compare FOLDER`'s table and CSV."""
    code = main(["compare", str(folder), "--baseline", "quickstart-grpo", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    return (out / "comparison.md").read_text(), (out / "comparison.csv").read_text()


def quiet(line: str) -> None:
    pass


def test_a_copied_sweep_folder_compares_as_the_original_and_alone(repo, tmp_path, capsys):
    sweep = two_by_two(repo, tmp_path / "a")
    run_sweep(sweep, say=quiet, trainers=scripted_trainers())
    original = tmp_path / "a" / "tiny"
    manifest = json.loads((original / "sweep.json").read_text())
    assert manifest["format"] == 2 and [c["run_dir"] for c in manifest["cells"]] == NAMES
    for c in manifest["cells"]:
        assert not Path(c["spec"]).is_absolute() and (original / c["spec"]).resolve().is_file()
        assert not [o for o in c["overrides"] if o.startswith("logging.root=")]

    copy = tmp_path / "b" / "tiny"
    shutil.copytree(original, copy)
    assert run_dirs([copy]) == [copy / name for name in NAMES]
    before = compared(original, tmp_path / "out1", capsys)
    assert "quickstart-grpo" in before[0]
    assert compared(copy, tmp_path / "out2", capsys) == before
    shutil.rmtree(original)
    assert compared(copy, tmp_path / "out3", capsys) == before
    # the same sweep at the copy's place: every cell is taken as finished (spec.yaml names the original)
    moved = sweep.model_copy(update={"root": str(tmp_path / "b")})
    assert {r.status for r in run_sweep(moved, say=quiet, trainers=scripted_trainers())} == {"skipped"}


def test_a_moved_folder_without_some_of_its_cells_is_refused(repo, tmp_path, capsys):
    run_sweep(two_by_two(repo, tmp_path / "a"), say=quiet, trainers=scripted_trainers())
    moved = tmp_path / "b" / "tiny"
    shutil.move(tmp_path / "a" / "tiny", moved)
    shutil.rmtree(moved / "quickstart-s1")
    capsys.readouterr()
    assert main(["compare", str(moved)]) == 3
    err = capsys.readouterr().err
    assert f"{moved / 'sweep.json'} names 1 of its 4 cells that are not in {moved}: quickstart-s1" in err
    assert "Copy those cell folders" in err and not (moved / "compare").exists()
    assert [(r.cell, r.status) for r in status_rows(moved)][1] == ("quickstart-s1", "missing")


def test_a_rerun_with_fewer_cells_keeps_the_others_rows(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path)
    run_sweep(sweep, say=quiet, trainers=scripted_trainers())
    run_sweep(sweep.model_copy(update={"seeds": (0,)}), say=quiet, trainers=scripted_trainers())
    rows = json.loads((tmp_path / "tiny" / "sweep.json").read_text())["cells"]
    assert sorted(c["name"] for c in rows) == sorted(NAMES)  # the seed-1 cells are still there
    shutil.rmtree(tmp_path / "tiny" / "quickstart-s1")  # removed by hand: its row goes at the next rerun
    run_sweep(sweep.model_copy(update={"seeds": (0,)}), say=quiet, trainers=scripted_trainers())
    rows = json.loads((tmp_path / "tiny" / "sweep.json").read_text())["cells"]
    assert "quickstart-s1" not in [c["name"] for c in rows]


def as_before_issue_49(sweep: SweepSpec, started: int = 4) -> Path:
    """The sweep's folder, run, rewritten as pats wrote it before issue 49: its sweep.json (absolute
    spec and run_dir, `logging.root=` among the overrides) and no status records or logs.
    quickstart-s1 was interrupted (its latest checkpoint is the step before its last); the cells after
    the first `started` never started (that pats made a cell's folder when the cell started)."""
    planned = cells(sweep)
    folder = planned[0].run_dir.parent
    run_sweep(sweep, say=quiet, trainers=scripted_trainers())
    rows = [
        {
            "name": c.name,
            "condition": c.condition,
            "seed": c.seed,
            "spec": c.source,
            "overrides": list(c.overrides),
            "run_dir": str(c.run_dir),
        }
        for c in planned
    ]  # fmt: skip  (the old write_manifest's rows)
    (folder / "sweep.json").write_text(json.dumps({"name": "tiny", "cells": rows}, indent=1))
    for cell in planned:
        for name in ("status.json", "log.txt", "traceback.txt"):
            (cell.run_dir / name).unlink(missing_ok=True)
    interrupted = folder / "quickstart-s1" / "checkpoints"
    (interrupted / "latest.json").write_text((interrupted / "step_000001" / "state.json").read_text())
    for cell in planned[started:]:
        shutil.rmtree(cell.run_dir)
    assert f"logging:\n  root: {folder}\n" in (folder / "quickstart-s0" / "spec.yaml").read_text()
    return folder


def test_a_folder_written_before_issue_49_in_place(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path)
    folder = as_before_issue_49(sweep, started=3)
    # compare reads the cells there; the one that has not started is not "missing" in its own folder
    assert run_dirs([folder]) == [folder / n for n in NAMES[:3]]
    assert [(r.cell, r.status, r.steps) for r in status_rows(folder)] == [
        ("quickstart-s0", "finished", "3/3"), ("quickstart-s1", "started", "3/3"),
        ("quickstart-grpo-s0", "finished", "3/3"), ("quickstart-grpo-s1", "pending", "-"),
    ]  # fmt: skip
    results = run_sweep(sweep, say=quiet, trainers=scripted_trainers())
    assert [r.status for r in results] == ["skipped", "resumed", "skipped", "ran"]
    steps = [e.step for e in read_events(folder / "quickstart-s1" / "events.jsonl", StepEndEvent)]
    assert steps == [0, 1, 2]  # resumed from step 1's checkpoint: every step logged once
    manifest = json.loads((folder / "sweep.json").read_text())
    assert manifest["format"] == 2 and [c["run_dir"] for c in manifest["cells"]] == NAMES


def test_a_folder_written_before_issue_49_moved(repo, tmp_path, capsys):
    old = as_before_issue_49(two_by_two(repo, tmp_path / "a"))
    shutil.rmtree(old / "quickstart-s0" / "checkpoints")  # as committed: no checkpoints, still finished
    moved = tmp_path / "b" / "tiny"
    shutil.move(old, moved)
    # its manifest, its specs and its checkpoints name the old place: found by name under the new one
    assert run_dirs([moved]) == [moved / n for n in NAMES]
    partial = tmp_path / "c" / "tiny"  # a copy without one of its cells: refused
    shutil.copytree(moved, partial)
    shutil.rmtree(partial / "quickstart-grpo-s1")
    assert main(["compare", str(partial)]) == 3
    assert "names 1 of its 4 cells that are not in" in capsys.readouterr().err
    results = run_sweep(two_by_two(repo, tmp_path / "b"), say=quiet, trainers=scripted_trainers())
    # spec.yaml's logging.root names tmp/a: not "another spec"; the interrupted cell resumes from its
    # own checkpoint (latest.json names the one under tmp/a)
    assert [r.status for r in results] == ["skipped", "resumed", "skipped", "skipped"]
    steps = [e.step for e in read_events(moved / "quickstart-s1" / "events.jsonl", StepEndEvent)]
    assert steps == [0, 1, 2]
    assert [r.status for r in status_rows(moved)] == ["finished"] * 4
