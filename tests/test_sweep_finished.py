"""What `pats sweep` takes for a finished cell (pats/sweep/checks.py `finished`): its last step's end in the
log and, where it keeps pats checkpoints, that step checkpointed. A cell whose log ends its last step
while its latest checkpoint is an earlier one died between the two: it is not finished, it resumes
(issue 49, item 8)."""

from __future__ import annotations

from pats.engine.run import latest_checkpoint, run_spec
from pats.spec import load_spec
from pats.sweep import SweepSpec, cells, finished, run_cell
from pats.testing.sweep import scripted_trainers


def step_of_latest(run_dir) -> int | None:
    state = latest_checkpoint(run_dir)
    return state.step if state else None


def test_a_cell_whose_latest_checkpoint_is_before_its_last_logged_step_is_not_finished(repo, tmp_path):
    sweep = SweepSpec(
        name="one", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0,), root=str(tmp_path),
        overrides=("trainer.steps=3", "trainer.checkpoint_every=1", "eval.every=3", "eval.gap_tasks=0",
                   "logging.wandb=disabled", "logging.progress=false"),
    )  # fmt: skip
    (cell,) = cells(sweep)
    run_dir = run_spec(cell.spec, scripted_trainers())
    assert run_dir == cell.run_dir and finished(run_dir, 3)
    assert not finished(run_dir, 4)  # a cell asked for more steps than it logged
    # the checkpoint of the last step never reached latest.json: the one before it is the latest
    latest = run_dir / "checkpoints" / "latest.json"
    latest.write_text((run_dir / "checkpoints" / "step_000001" / "state.json").read_text())
    assert step_of_latest(run_dir) == 1
    assert not finished(run_dir, 3)
    assert run_cell(cell, scripted_trainers()).status == "resumed"
    assert finished(run_dir, 3) and step_of_latest(run_dir) == 2


def test_a_run_without_pats_checkpoints_is_finished_by_its_log_alone(repo, tmp_path):
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.gap_tasks=0", "logging.wandb=disabled", "logging.progress=false",
         f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    (run_dir / "checkpoints" / "latest.json").unlink()  # as verl's runs keep theirs elsewhere
    assert finished(run_dir, 2) and not finished(run_dir, 3)
    (run_dir / "events.jsonl").unlink()
    assert not finished(run_dir, 2)
