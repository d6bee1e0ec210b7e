"""What `pats compare` rests on, said (issue 59, items 3 and 4; issue 58, item 5): a `pats eval` without
--with-scaffold keeps the cell's with-scaffold results, a with-scaffold column resting on fewer seeds
than its row names which, sweep cells with no run are named with why, and the share of groups shown a
plan has its column."""

from __future__ import annotations

import csv
import io
import math

import pytest
from test_compare import craft

from pats.cli.main import main
from pats.compare import compare, read_run, run_dirs
from pats.compare.output import markdown
from pats.engine.evaluate import EvalOutcomes, eval_path, outcomes_path
from pats.spec import load_spec
from pats.sweep.manifest import ManifestCell, write_manifest
from pats.sweep.record import CellStatus, write_status


def test_a_pats_eval_without_the_scaffold_keeps_the_earlier_with_scaffold_results(
    repo, tmp_path, monkeypatch
):
    from pats.engine import evaluate
    from pats.engine.run import run_spec
    from pats.testing import FakeEnv, ScriptedBackend, improving_schedule
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.at_start=false", "eval.gap_tasks=0", "logging.wandb=disabled",
         "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    monkeypatch.setattr(
        evaluate, "make_env_factory", lambda s: lambda: FakeEnv(num_tasks=s.environment.num_eval_tasks)
    )
    monkeypatch.setattr(evaluate, "make_backend", lambda s, make_env: ScriptedBackend(improving_schedule()))
    lines: list[str] = []
    evaluate.evaluate_run(run_dir, num_tasks=6, with_scaffold=True, say=lines.append)
    first = EvalOutcomes.model_validate_json(outcomes_path(run_dir, "eval").read_text())
    with_scaffold = first.outcomes_with_scaffold
    assert len(with_scaffold) == 6
    metrics = evaluate.evaluate_run(run_dir, num_tasks=8, with_scaffold=False, say=lines.append)
    again = EvalOutcomes.model_validate_json(outcomes_path(run_dir, "eval").read_text())
    assert (len(again.outcomes), again.outcomes_with_scaffold) == (8, with_scaffold)
    assert "eval_with_scaffold/success" in metrics
    assert (
        lines[-1] == "kept the with-scaffold results of the earlier `pats eval` of this checkpoint (6 tasks)"
    )
    record = read_run(run_dir)
    assert (record.heldout_source, record.heldout_with_scaffold) == ("pats eval", with_scaffold)
    # results of another checkpoint are not this one's: not kept
    stale = again.model_copy(update={"checkpoint_step": 0})
    outcomes_path(run_dir, "eval").write_text(stale.model_dump_json())
    evaluate.evaluate_run(run_dir, num_tasks=4, with_scaffold=False, say=lines.append)
    assert (
        EvalOutcomes.model_validate_json(outcomes_path(run_dir, "eval").read_text()).outcomes_with_scaffold
        == {}
    )
    assert "eval_with_scaffold/success" not in eval_path(run_dir, "eval").read_text()


def test_a_with_scaffold_column_resting_on_fewer_seeds_names_them_and_why(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [1.0]}, {"g0": [1.0]})
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"g0": [0.0]})  # its training evaluation had no scaffold
    late = craft(tmp_path, repo, "pats-s2", 2, "pats", {"g0": [0.0]}, {"g0": [1.0]})
    (late / "checkpoints").mkdir()
    (late / "checkpoints" / "latest.json").write_text('{"step": 2, "path": "step_000002"}')
    outcomes_path(late, "eval").parent.mkdir()
    played = EvalOutcomes(checkpoint_step=2, split="eval", outcomes={"g0": (1.0,)})  # without --with-scaffold
    outcomes_path(late, "eval").write_text(played.model_dump_json())
    result = compare([read_run(d) for d in run_dirs([tmp_path])])
    assert result.rows[0].seeds == (0, 1, 2)
    assert (
        "pats: held-out success with the scaffold and the reliance gap rest on seed 0 only, without the "
        "scaffold on seeds 0, 1, 2 (pats-s1: its last evaluation played no episodes with the scaffold; "
        "pats-s2: its `pats eval` ran without --with-scaffold (rerun it with --with-scaffold))."
    ) in result.notes
    everywhere = compare([read_run(tmp_path / "pats-s0")])
    assert not [n for n in everywhere.notes if "with the scaffold and the reliance gap" in n]


def test_sweep_cells_that_failed_before_their_run_existed_are_named_with_why(tmp_path, repo, capsys):
    """A sweep of 4 cells, 2 of them without a run (one failed at its start, one not started): compare
    still compares the 2 it can read, and says which cells it could not and why."""
    sweep = tmp_path / "sweep"
    for condition in ("a", "b"):
        craft(sweep, repo, f"{condition}-s0", 0, "none", {"g0": [0.0]})
    write_status(
        sweep / "a-s1",
        CellStatus(status="failed", error="SpecError: 1 problem in the spec\n  trainer.lr: not a number"),
    )
    write_status(sweep / "b-s1", CellStatus(status="pending"))
    rows = [ManifestCell(name=f"{c}-s{s}", condition=c, seed=s, spec="x.yaml", overrides=(), run_dir=f"{c}-s{s}")
            for s in (0, 1) for c in ("a", "b")]  # fmt: skip
    write_manifest(sweep, "sweep", rows, ())
    assert main(["compare", str(sweep), "--baseline", "a", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "# Comparison of 2 conditions" in printed
    assert (
        f"- {sweep / 'sweep.json'} names 2 cells of 4 with no run to compare, left out of the table: a-s1 "
        "(failed before its run existed: SpecError: 1 problem in the spec); b-s1 (not started yet). "
        f"`pats sweep status {sweep}` shows each cell; rerunning the sweep runs those not finished.\n"
    ) in printed


def test_a_cell_folder_gone_or_without_a_status_is_named_too(tmp_path, repo):
    from pats.compare import unread_cells

    sweep = tmp_path / "sweep"
    craft(sweep, repo, "a-s0", 0, "none", {"g0": [0.0]})
    (sweep / "a-s1").mkdir()
    rows = [ManifestCell(name=f"a-s{s}", condition="a", seed=s, spec="x.yaml", overrides=(), run_dir=f"a-s{s}")
            for s in (0, 1)]  # fmt: skip
    write_manifest(sweep, "sweep", rows, ())
    said = [
        f"{sweep / 'sweep.json'} names 1 cell of 2 with no run to compare, left out of the table: a-s1 (no run "
        f"and no readable status.json in its folder). `pats sweep status {sweep}` shows each cell; rerunning "
        "the sweep runs those not finished."
    ]
    assert unread_cells([sweep]) == said
    assert unread_cells([sweep / "a-s0"]) == []  # a run, not a sweep folder: nothing to say
    assert unread_cells([sweep / "a-s0", sweep]) == said  # a run given first: the sweep after it still read


def test_the_share_of_groups_shown_a_plan_has_its_column(tmp_path, repo):
    steps = [{"train/success": 0.5, "coverage/plan_fraction": 0.25},
             {"train/success": 0.5, "coverage/plan_fraction": 0.75}]  # fmt: skip
    for seed in (0, 1):
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", {"g0": [1.0]}, steps=steps)
        craft(tmp_path, repo, f"old-s{seed}", seed, "pats", {"g0": [1.0]})  # logged before coverage
    result = compare([read_run(d) for d in run_dirs([tmp_path])])
    rows = {r.condition: r for r in result.rows}
    assert rows["pats"].plan_fraction == 0.5 and math.isnan(rows["old"].plan_fraction)
    table = markdown(result)
    assert "| informative groups | shown a plan | prompt tokens |" in table
    assert "| 0.500 | - | 0.500 | - |" in table  # pats: train success, informative, shown a plan, tokens
    from pats.compare.output import csv_text

    by_condition = {r["condition"]: r for r in csv.DictReader(io.StringIO(csv_text(result)))}
    assert float(by_condition["pats"]["plan_fraction"]) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("status", "why"),
    [
        (CellStatus(status="running"), "started, its run not written yet"),
        (CellStatus(status="interrupted"), "interrupted before its run existed"),
        (CellStatus(status="failed"), "failed before its run existed: no error recorded"),
        (CellStatus(status="finished"), "finished, but its folder holds no run"),
    ],
)
def test_each_status_of_a_cell_without_a_run_says_why(tmp_path, status, why):
    from pats.compare.runs import _no_run

    write_status(tmp_path / "cell", status)
    assert _no_run(tmp_path / "cell") == why
    assert _no_run(tmp_path / "gone") == "not started"


def test_a_condition_with_the_scaffold_on_every_seed_does_not_hide_the_next_ones_note(tmp_path, repo):
    from pats.compare.notes import with_scaffold_notes

    craft(tmp_path, repo, "all-s0", 0, "pats", {"g0": [1.0]}, {"g0": [1.0]})
    craft(tmp_path, repo, "some-s0", 0, "pats", {"g0": [1.0]}, {"g0": [1.0]})
    craft(tmp_path, repo, "some-s1", 1, "pats", {"g0": [0.0]})
    groups = {
        "all": [read_run(tmp_path / "all-s0")],
        "some": [read_run(tmp_path / f"some-s{s}") for s in (0, 1)],
    }
    assert with_scaffold_notes(groups) == [
        "some: held-out success with the scaffold and the reliance gap rest on seed 0 only, without the "
        "scaffold on seeds 0, 1 (some-s1: its last evaluation played no episodes with the scaffold)."
    ]
