"""experiments/sweeps/demonstration.yaml (issue 43, item 5; docs/ablations.md, "Demonstration grid"):
a valid sweep of 4 conditions x 2 seeds whose cells share the transfer pilot's trainer, pool and
held-out evaluation, and whose conditions differ from the full loop in one thing each. Planning only:
nothing loads a model or plays a game."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from pats.sweep import cells
from pats.sweep.checks import flat_fields
from pats.sweep.grid import load_sweep_file

# Each condition against the full loop (quickstart) of the same seed: the keys that differ, and how.
CONDITIONS = {
    "quickstart": {},
    "quickstart-grpo": {"scaffold.mode": ("pats", "none")},
    "quickstart-no-contrast": {
        "scaffold.cards": (["outcome", "contrast", "failure", "utility"], ["outcome", "failure", "utility"])
    },
    "quickstart-no-removal": {"scaffold.removal": (True, False)},
}  # in the sweep's order: no_removal last (docs/ablations.md)


@pytest.fixture(scope="module")
def planned(repo):
    return cells(load_sweep_file(repo / "experiments/sweeps/demonstration.yaml"))


def resolved(cell) -> dict[str, Any]:
    """The cell's resolved spec without what the sweep sets per cell (name, seed, logging.root/group)."""
    out = flat_fields(cell.spec.model_dump(mode="json"))
    for key in ("name", "seed", "logging.root", "logging.group"):
        out.pop(key)
    return out


def test_the_grid_is_four_conditions_by_two_seeds(planned):
    assert [(c.condition, c.seed) for c in planned] == [(k, s) for k in CONDITIONS for s in (0, 1)]
    assert {c.name for c in planned} == {f"{k}-s{s}" for k in CONDITIONS for s in (0, 1)}
    assert {c.spec.logging.group for c in planned} == {"demonstration"}
    assert {c.spec.logging.root for c in planned} == {str(planned[0].run_dir.parent)}
    assert planned[0].run_dir.parent.parts[-4:] == ("bench", "results", "sweeps", "demonstration")


def test_the_cells_land_where_git_commits_them(repo):
    """Each cell is committed as it finishes: its folder must not be ignored (runs/ is)."""
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    cell = "bench/results/sweeps/demonstration/quickstart-s0/events.jsonl"
    ignored = subprocess.run(["git", "check-ignore", "-q", cell], cwd=repo, check=False)
    assert ignored.returncode == 1, f"{cell} is ignored by git"


def test_every_cell_has_the_transfer_pilots_trainer_and_the_same_evaluation(planned):
    for cell in planned:
        s = cell.spec
        assert (s.environment.game, s.environment.params) == (
            "twc",
            {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0},
        )  # twc1
        assert s.environment.num_train_tasks == 1000  # a pool that (almost) never recurs
        tr = s.local_trainer()
        assert (tr.lr, tr.tasks_per_step, tr.group_size) == (1e-3, 4, 8)
        assert s.policy.lora.top_layers == 8 and s.policy.lora.rank == 16
        assert s.scaffold.initial_bank is None
        # held-out: dev 192-223 (unplayed by earlier campaigns) x 4 sampled episodes, the untrained
        # policy first, the endpoint after the last step
        ev = s.eval
        assert s.eval_tasks() == slice(192, 224)
        assert (ev.samples_per_task, ev.greedy) == (4, False)
        assert ev.at_start and not ev.pool
        assert tr.steps % ev.every == 0 and tr.steps // ev.every == 1  # evaluated once, after the last step


def test_conditions_differ_from_the_full_loop_in_one_thing_each(planned):
    full = {c.seed: resolved(c) for c in planned if c.condition == "quickstart"}
    for cell in planned:
        mine, theirs = resolved(cell), full[cell.seed]
        keys = mine.keys() | theirs.keys()
        diff = {k: (theirs.get(k), mine.get(k)) for k in keys if mine.get(k) != theirs.get(k)}
        assert diff == CONDITIONS[cell.condition], cell.name


def test_seeds_differ_only_in_the_seed(planned):
    by_condition: dict[str, list] = {}
    for cell in planned:
        by_condition.setdefault(cell.condition, []).append(cell)
    for condition, (s0, s1) in by_condition.items():
        assert (s0.seed, s1.seed) == (0, 1)
        assert resolved(s0) == resolved(s1), condition
