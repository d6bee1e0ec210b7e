"""What `pats compare` reads of one run (pats.compare.runs): its condition, the evaluation it counts as
held-out (the last trained one, or `pats eval`'s), the untrained evaluation kept apart, the step means
and the last step's scaffold size, the curves; and which run folders an argument names."""

from __future__ import annotations

import math

import pytest
from test_compare import craft

from pats.compare import read_run, run_dirs
from pats.compare.runs import condition_of
from pats.engine.evaluate import EvalOutcomes, outcomes_path
from pats.errors import PrerequisiteError
from pats.sweep.manifest import ManifestCell, write_manifest


def test_a_condition_is_the_name_without_its_own_seeds_suffix():
    assert condition_of("quickstart-s1", 1) == "quickstart"
    assert condition_of("quickstart-s1", 0) == "quickstart-s1"  # another seed's suffix stays
    assert condition_of("quickstart", 0) == "quickstart"  # no suffix
    assert condition_of("-s0", 0) == "-s0"  # nothing but the suffix: kept whole, never empty


def test_an_evaluation_after_step_0_is_held_out_and_no_evaluation_before_training_is_untrained(
    tmp_path, repo
):
    """A one-step run evaluated after step 0 (and not before training): that evaluation is the held-out
    one, and the run has no untrained outcomes."""
    run = read_run(craft(tmp_path, repo, "one-s0", 0, "none", {"g0": [1.0]}, steps=[{"train/success": 0.5}]))
    assert (run.eval_step, run.heldout, run.heldout_source) == (0, {"g0": (1.0,)}, "training")
    assert run.at_start == {}


def test_step_means_the_last_steps_scaffold_and_every_curve(tmp_path, repo):
    steps = [
        {"train/success": 0.25, "train/informative_fraction": 0.5, "train/prompt_tokens": 100.0},
        {"train/success": 0.75, "train/informative_fraction": 1.0, "train/prompt_tokens": 200.0,
         "scaffold/entries": 4.0, "scaffold/tokens": 90.0},
    ]  # fmt: skip
    run = read_run(
        craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [0.0]}, steps=steps, at_start={"g0": [0.0]})
    )
    assert (run.train_success, run.informative_fraction, run.prompt_tokens) == (0.5, 0.75, 150.0)
    assert (run.scaffold_entries, run.scaffold_tokens) == (4.0, 90.0)
    assert run.curves["train/success"] == ((0, 0.25), (1, 0.75))
    assert run.curves["eval/success"] == ((-1, 0.0), (1, 0.0))  # before training and after the last step

    bare = read_run(
        craft(tmp_path, repo, "none-s0", 0, "none", {"g0": [0.0]}, steps=[{"train/success": 0.5}])
    )
    assert (bare.scaffold_entries, bare.scaffold_tokens) == (0.0, 0.0)  # no scaffold: none, not unknown
    assert math.isnan(bare.informative_fraction) and "scaffold/tokens" not in bare.curves


def test_a_pats_eval_counts_for_a_run_never_evaluated_in_training(tmp_path, repo):
    """`pats eval` of the latest checkpoint is the held-out result of a run whose training never
    evaluated (eval_step None before it)."""
    run_dir = craft(tmp_path, repo, "late-s0", 0, "none", None, steps=[{"train/success": 0.5}])
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "latest.json").write_text('{"step": 0, "path": "step_000000"}')
    assert read_run(run_dir).eval_step is None
    outcomes_path(run_dir, "eval").parent.mkdir()
    played = EvalOutcomes(checkpoint_step=0, split="eval", outcomes={"g0": (1.0,)}, outcomes_with_scaffold={})
    outcomes_path(run_dir, "eval").write_text(played.model_dump_json())
    run = read_run(run_dir)
    assert (run.eval_step, run.heldout, run.heldout_source) == (0, {"g0": (1.0,)}, "pats eval")


def test_run_dirs_takes_runs_sweep_folders_and_folders_of_runs_together(tmp_path, repo):
    single = craft(tmp_path / "single", repo, "alone-s0", 0, "none", {"g0": [0.0]})
    sweep = tmp_path / "sweep"
    cells = [craft(sweep, repo, f"c-s{s}", s, "none", {"g0": [0.0]}) for s in (0, 1)]
    write_manifest(sweep, "sweep", [ManifestCell(name=c.name, condition="c", seed=s, spec="x.yaml",
                                                 overrides=(), run_dir=c.name) for s, c in enumerate(cells)], ())  # fmt: skip
    plain = tmp_path / "plain"
    others = [craft(plain, repo, f"p-s{s}", s, "none", {"g0": [0.0]}) for s in (1, 0)]
    assert run_dirs([single, sweep, plain, single]) == [single, *cells, *sorted(others)]
    assert run_dirs([sweep, single]) == [*cells, single]

    with pytest.raises(PrerequisiteError) as err:
        run_dirs([single, tmp_path / "nothing"])
    assert str(err.value) == (
        f"{tmp_path / 'nothing'} is neither a pats run (no spec.yaml) nor a folder of runs; give runs/<name> "
        "or a sweep folder (runs/sweeps/<sweep>)"
    )
