"""`run_sweep` (pats/sweep/run.py), from its mutation run: what it says, line by line, when it
skips a finished cell and resumes one that checkpointed before it failed; and that with a Ray address
the runnable cells go to Ray with the asks (and each cell's threads), none run here. Cells train
through pats' own train() with FakeEnv and a scripted policy (pats.testing.sweep)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from pats.errors import RunInterrupted
from pats.host import machine_cpus
from pats.sweep import SweepSpec, run_sweep
from pats.sweep import cluster as cluster_module
from pats.sweep.cell import CellResult, run_cell
from pats.sweep.cluster import Asks
from pats.testing.fakes import ScriptedBackend, improving_schedule
from pats.testing.sweep import scripted_trainers, train_on_fakes

TINY = ("trainer.steps=3", "trainer.tasks_per_step=2", "eval.every=3", "eval.gap_tasks=0",
        "logging.wandb=disabled", "logging.progress=false")  # fmt: skip


def one_by_two(repo: Path, root: Path) -> SweepSpec:
    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    return SweepSpec(name="tiny", specs=specs, seeds=(0,), overrides=TINY, root=str(root))


class _BreaksAtStep1(ScriptedBackend):
    """Step 0 trains and is checkpointed; step 1's rollouts fail, as a lost node would."""

    async def rollout(self, step, plans):
        if step == 1:
            raise RuntimeError("lost the node (scripted)")
        return await super().rollout(step, plans)


def _breaks(spec, run_dir, state):
    return train_on_fakes(spec, run_dir, state, lambda s: _BreaksAtStep1(improving_schedule(), seed=s.seed))


def test_a_finished_cell_is_skipped_and_a_checkpointed_one_resumed_each_said_in_order(repo, tmp_path):
    sweep = one_by_two(repo, tmp_path)
    (local,) = scripted_trainers().values()

    def grpo_breaks(spec, run_dir, state):
        return (_breaks if spec.name == "quickstart-grpo-s0" else local)(spec, run_dir, state)

    first = run_sweep(sweep, say=lambda line: None, trainers={"local": grpo_breaks})
    assert [r.status for r in first] == ["ran", "failed"]
    folder = tmp_path / "tiny"
    assert (folder / "quickstart-grpo-s0" / "checkpoints" / "latest.json").is_file()

    lines: list[str] = []
    again = run_sweep(sweep, say=lines.append, trainers=scripted_trainers())
    assert again[0] == CellResult("quickstart-s0", "skipped", 0.0, "")
    assert (again[1].name, again[1].status) == ("quickstart-grpo-s0", "resumed")
    assert lines[:3] == [
        f"sweep tiny: 2 cells (2 conditions x 1 seed) in {folder}",
        f"cell 1/2 quickstart-s0: already finished, skipped ({folder / 'quickstart-s0'})",
        "cell 2/2 quickstart-grpo-s0: resuming from step 1",  # its checkpoint is step 0's (issue 59)
    ]
    assert re.fullmatch(
        rf"cell 2/2 quickstart-grpo-s0: resumed and finished in \d+ s \({re.escape(str(folder))}/quickstart-grpo-s0\)",
        lines[3],
    )
    assert lines[4].startswith("sweep tiny: 1 resumed, 1 skipped; `pats sweep status ")
    assert len(lines) == 5


def test_with_a_ray_address_the_runnable_cells_go_to_ray_with_their_asks(repo, tmp_path, monkeypatch):
    sweep = one_by_two(repo, tmp_path)
    first_spec_only = sweep.model_copy(update={"specs": sweep.specs[:1]})
    run_sweep(first_spec_only, say=lambda line: None, trainers=scripted_trainers())  # its cell finished
    sent: list[tuple] = []

    def run_ray(runnable, total, address, asks, say, trainers):
        sent.append(([(i, c.name, c.spec.trainer.threads) for i, c in runnable], total, address, asks))
        return {i: run_cell(cell, trainers) for i, cell in runnable}  # here, in Ray's place

    monkeypatch.setattr(cluster_module, "import_ray", lambda: None)
    monkeypatch.setattr(cluster_module, "run_ray", run_ray)
    lines: list[str] = []
    results = run_sweep(sweep, "local", lines.append, scripted_trainers(), parallel=2)
    asks = Asks(machine_cpus() / 2, 0.0, 0.0, 2)
    assert sent == [([(2, "quickstart-grpo-s0", asks.threads)], 2, "local", asks)]
    assert [(r.name, r.status) for r in results] == [
        ("quickstart-s0", "skipped"),
        ("quickstart-grpo-s0", "ran"),
    ]
    assert not any(": starting" in line for line in lines)  # none ran one after another here


def test_the_last_line_counts_refused_cells(repo, tmp_path):
    sweep = one_by_two(repo, tmp_path)
    run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())
    changed = sweep.model_copy(update={"overrides": (*TINY, "trainer.steps=4")})
    lines: list[str] = []
    results = run_sweep(changed, say=lines.append, trainers=scripted_trainers())
    assert [(r.status, r.seconds) for r in results] == [("refused", 0.0), ("refused", 0.0)]
    assert lines[-1].startswith("sweep tiny: 2 refused; `pats sweep status ")


def test_a_serial_sweep_stopped_by_a_signal_says_so_and_to_rerun_it(repo, tmp_path):
    """Issue 59, items 2 and 5: the serial path's lines, which --parallel now repeats; its error named
    `pats run --resume CELL` where the sweep is what to rerun."""
    sweep = one_by_two(repo, tmp_path)
    lines: list[str] = []
    with pytest.raises(RunInterrupted) as stopped:
        run_sweep(sweep, say=lines.append, trainers=scripted_trainers(stops="quickstart-s0"))
    folder = tmp_path / "tiny"
    assert stopped.value.signum == signal.SIGTERM and stopped.value.exit_code == 143
    assert str(stopped.value) == (
        "the sweep stopped at your request: 1 cell stopped (quickstart-s0). Rerun the same `pats sweep` "
        "command to go on: finished cells are skipped, stopped ones resume from their last checkpoint, the "
        f"others start (`pats sweep status {folder}` shows each cell)"
    )
    assert lines[1:] == [
        "cell 1/2 quickstart-s0: starting",
        "cell 1/2 quickstart-s0: interrupted: stopped at your request after step 0 (checkpointed) "
        f"(log: {folder / 'quickstart-s0' / 'log.txt'})",
    ]
