"""`pats compare`'s notes read whole, and only where they apply: seeds a row lacks (a condition's run, the
untrained policy's evaluation), games an interval left out or counted once per seed (issue 49)."""

from __future__ import annotations

from dataclasses import replace

from test_compare import craft
from test_compare_pairing import compared, games

from pats.compare import compare, read_run
from pats.compare.output import markdown


def test_a_condition_missing_a_seed_is_named_after_complete_ones_and_one_without_outcomes_too(tmp_path, repo):
    for seed in (0, 1):  # grpo complete, listed first
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", games("1000"))
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("1100"))
    craft(tmp_path, repo, "wait-s1", 1, "pats", None)  # not evaluated yet
    notes = compared(tmp_path).notes
    assert "pats: no run of seed 1 (other conditions have it); its row rests on seed 0." in notes
    assert "wait: no run of seed 0 (other conditions have it); its row rests on no seed." in notes


def test_seeds_without_an_untrained_evaluation_are_named_with_how_to_get_one(tmp_path, repo):
    for seed in (0, 1, 2):
        craft(
            tmp_path,
            repo,
            f"grpo-s{seed}",
            seed,
            "none",
            games("10"),
            at_start=games("00") if seed == 0 else None,
        )
    assert (
        "untrained: no evaluation of the untrained policy for seeds 1, 2 (eval.at_start: true in a cell of "
        "those seeds adds it); its row rests on seed 0." in compared(tmp_path).notes
    )
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("11"), at_start=games("01"))
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("11"), at_start=games("01"))
    assert (
        "untrained: no evaluation of the untrained policy for seed 2 (eval.at_start: true in a cell of "
        "that seed adds it); its row rests on seeds 0, 1." in compared(tmp_path).notes
    )


def test_games_left_out_of_a_crossed_interval_are_said_whole(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("110100101101"))
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("011010"))
    assert [n for n in compared(tmp_path).notes if n.startswith("pats:")] == [
        "pats: seeds played different held-out games (s0 12, s1 6); its intervals use the 6 games every seed "
        "played (crossed), the others are left out. Evaluate every cell on the same games (`pats eval CELL "
        "--tasks N` on each) to use them all."
    ]


def test_an_interval_on_every_game_of_every_seed_has_no_note_on_games(tmp_path, repo):
    for seed in (0, 1):  # crossed on all games
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", games("1100"))
    result = compared(tmp_path)
    assert result.rows[0].design == "crossed"
    assert [n for n in result.notes if n.startswith("pats:")] == []
    craft(tmp_path, repo, "solo-s2", 2, "pats", games("01", prefix="h"))  # a third seed, its own games
    craft(tmp_path, repo, "solo-s3", 3, "pats", games("10", prefix="k"))
    solo = next(r for r in compared(tmp_path).rows if r.condition == "solo")
    assert solo.design == "nested"  # no game shared, none counted twice: nothing to say about games
    assert not any(n.startswith("solo: no game is shared") for n in compared(tmp_path).notes)


def test_one_seeds_games_read_per_seed(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("1100"))
    assert "| pats | pats | 0 | 3/3 | 4 per seed |" in markdown(compared(tmp_path))


def test_seeds_sharing_some_games_but_none_in_common_are_warned_whole(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", {"a": [1.0], "b": [0.0]})
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"b": [1.0], "c": [0.0]})
    craft(tmp_path, repo, "pats-s2", 2, "pats", {"c": [1.0], "a": [0.0]})
    assert [n for n in compared(tmp_path).notes if n.startswith("pats:")] == [
        "pats: no game is shared by every seed, yet some seeds share games: the nested interval counts such "
        "a game once per seed, as if they were different games, which can make it too narrow. Evaluate "
        "every seed on the same games."
    ]


def test_a_difference_says_the_seeds_and_games_it_left_out_whole_and_nothing_when_none(tmp_path, repo):
    craft(tmp_path, repo, "grpo-s0", 0, "none", games("100000"))
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("110100101101"))  # pats eval --tasks 12 on this cell
    assert [n for n in compared(tmp_path, "grpo").notes if n.startswith("pats minus grpo")] == [
        "pats minus grpo: on the 6 games every seed of both played (pats: 12 per seed; grpo: 6 per seed), "
        "the others left out."
    ]
    craft(tmp_path, repo, "grpo-s1", 1, "none", games("010000"))
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("011010"))
    craft(tmp_path, repo, "grpo-s2", 2, "none", games("001000"))
    assert [n for n in compared(tmp_path, "grpo").notes if n.startswith("pats minus grpo")] == [
        "pats minus grpo: paired on seeds 0, 1 only (seed 2: only grpo has held-out outcomes).",
        "pats minus grpo: on the 6 games every seed of both played (pats: s0 12, s1 6; grpo: 6 per seed), "
        "the others left out.",
    ]


def test_a_difference_on_every_game_of_the_seeds_both_have_has_no_note(tmp_path, repo):
    for seed in (0, 1):
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", games("1100"))
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", games("1000"))
    assert not any(n.startswith("pats minus grpo") for n in compared(tmp_path, "grpo").notes)


def test_a_nested_difference_says_it_pairs_within_each_seed(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", {"a": [1.0], "b": [1.0], "c": [0.0]})
    craft(tmp_path, repo, "grpo-s0", 0, "none", {"a": [0.0], "b": [1.0]})
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"x": [1.0], "y": [0.0]})
    craft(tmp_path, repo, "grpo-s1", 1, "none", {"x": [0.0], "y": [0.0]})
    (diff,) = compared(tmp_path, "grpo").differences
    assert diff.difference.design == "nested"
    assert [n for n in compared(tmp_path, "grpo").notes if n.startswith("pats minus grpo")] == [
        "pats minus grpo: in each seed, on the games both played (pats: s0 3, s1 2; grpo: 2 per seed), the "
        "others left out."
    ]


def test_each_runs_state_is_noted_only_where_it_is_not_the_whole_run(tmp_path, repo):
    done = read_run(craft(tmp_path, repo, "pats-s0", 0, "pats", games("1100")))
    going = read_run(craft(tmp_path, repo, "pats-s1", 1, "pats", None, steps=[{"train/success": 0.5}]))
    also = replace(
        read_run(craft(tmp_path, repo, "pats-s3", 3, "pats", games("0100"))), heldout_source="pats eval"
    )
    measured = replace(
        read_run(craft(tmp_path, repo, "pats-s2", 2, "pats", games("1000"))), heldout_source="pats eval"
    )
    notes = [
        n
        for n in compare([done, going, measured, also]).notes
        if n.startswith(("pats-s", "Held-out", "The runs"))
    ]
    assert notes == [
        "pats-s1: 1 of 3 steps done (still going or stopped).",
        "pats-s1: no held-out evaluation of a trained checkpoint with per-game outcomes; left out of the "
        "intervals.",
        "Held-out outcomes from `pats eval` (report/outcomes_eval.json): pats-s2, pats-s3.",
    ]
    unmeasured = replace(going, eval_step=7)  # its last evaluation kept no per-game outcomes: not compared
    assert not any(n.startswith("The runs") for n in compare([done, unmeasured]).notes)
    later = replace(measured, eval_step=5)
    assert compare([done, later]).notes[-1] == (
        "The runs' last evaluations measured different steps' checkpoints: [2, 5]."
    )


ALIKE = "trained alike in"
DIFFER = (
    "Every pair of conditions with the same environment, policy, trainer and warm start showed the policy "
    "different scaffold histories in each seed they share."
)


def test_conditions_with_the_same_scaffold_history_in_a_seed_are_one_result_there(tmp_path, repo):
    """Two scaffold conditions whose reviews wrote the same guidance in seed 0 (different in seed 1), as
    two card ablations would where the ablated card never changed an edit."""
    for seed in (0, 1):
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", games("10"))
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", games("11"), guidance="explore first")
        same = "explore first" if seed == 0 else "take the key"
        craft(tmp_path, repo, f"nocontrast-s{seed}", seed, "pats", games("11"), guidance=same)
    notes = [n for n in compared(tmp_path).notes if ALIKE in n or n == DIFFER]
    assert notes == [
        "nocontrast and pats trained alike in seed 0: the same environment, policy, trainer and warm start, and "
        "the same scaffold history (the same versions at the same steps, or none), so there they are one "
        "result, not two (`pats scaffold CELL` shows a cell's versions)."
    ]


def test_a_run_still_going_is_not_called_alike_for_the_history_it_has_not_written(tmp_path, repo):
    """Stage 2's grid, read while it ran: a scaffold condition one step in had only the bank it started
    from, as the fixed-bank condition has all run, and the note called the two one result. A pair is
    compared once both did every step."""
    craft(tmp_path, repo, "static-s0", 0, "pats", games("11"), guidance="the bank")
    craft(
        tmp_path, repo, "loop-s0", 0, "pats", games("11"), guidance="the bank", steps=[{"train/success": 0.5}]
    )
    notes = compared(tmp_path).notes
    assert not [n for n in notes if ALIKE in n or n == DIFFER]
    assert "loop-s0: 1 of 3 steps done (still going or stopped)." in notes
    craft(tmp_path / "done", repo, "static-s0", 0, "pats", games("11"), guidance="the bank")
    craft(tmp_path / "done", repo, "loop-s0", 0, "pats", games("11"), guidance="the bank")
    assert [n for n in compared(tmp_path / "done").notes if ALIKE in n] == [
        "loop and static trained alike in seed 0: the same environment, policy, trainer and warm start, and "
        "the same scaffold history (the same versions at the same steps, or none), so there they are one "
        "result, not two (`pats scaffold CELL` shows a cell's versions)."
    ]


def test_a_history_differs_by_the_step_a_version_came_at_too(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("11"), guidance="explore first")
    late = craft(tmp_path, repo, "later-s0", 0, "pats", games("11"), guidance="explore first")
    (version,) = (late / "scaffold" / "versions").iterdir()
    version.write_text(version.read_text().replace('"step": 0', '"step": 2'))
    assert read_run(late).scaffold_history == ((2, read_run(tmp_path / "pats-s0").scaffold_history[0][1]),)
    assert [n for n in compared(tmp_path).notes if ALIKE in n or n == DIFFER] == [DIFFER]


def test_pairs_that_differ_are_said_to_though_the_pairs_compared_last_have_other_setups(tmp_path, repo):
    """The note rests on every pair with the same setup, not only the last pair looked at: here the last
    two pairs (with zlr, another learning rate) have none, the first differs."""
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("11"), guidance="explore first")
    craft(tmp_path, repo, "later-s0", 0, "pats", games("11"), guidance="take the key")
    other = ["trainer.lr=0.123"]
    craft(tmp_path, repo, "zlr-s0", 0, "pats", games("11"), guidance="explore first", overrides=other)
    comparison = compared(tmp_path)
    assert [row.condition for row in comparison.rows][-1] == "zlr"  # listed, and so paired, last
    assert [n for n in comparison.notes if ALIKE in n or n == DIFFER] == [DIFFER]


def test_game_parameters_written_in_another_order_are_the_same_setup(tmp_path, repo):
    """The setup compared is the spec's values, not the order its file lists a mapping's keys in (the
    environment's game parameters here): two runs that differ only in that trained alike."""
    from pats.spec import load_spec, spec_to_yaml

    craft(tmp_path, repo, "pats-s0", 0, "pats", games("11"), guidance="explore first")
    again = craft(tmp_path, repo, "again-s0", 0, "pats", games("11"), guidance="explore first")
    spec = load_spec(again / "spec.yaml")
    backwards = spec.environment.model_copy(
        update={"params": dict(reversed(spec.environment.params.items()))}
    )
    (again / "spec.yaml").write_text(spec_to_yaml(spec.model_copy(update={"environment": backwards})))
    assert list(load_spec(again / "spec.yaml").environment.params) != list(spec.environment.params)
    assert [n for n in compared(tmp_path).notes if ALIKE in n] == [
        "again and pats trained alike in seed 0: the same environment, policy, trainer and warm start, and "
        "the same scaffold history (the same versions at the same steps, or none), so there they are one "
        "result, not two (`pats scaffold CELL` shows a cell's versions)."
    ]


def test_runs_that_differ_in_training_settings_are_not_called_alike(tmp_path, repo):
    """A learning-rate sweep without a scaffold: every history is empty, yet the runs trained differently,
    so there is no note either way."""
    for lr in ("1e-4", "3e-4"):
        craft(tmp_path, repo, f"lr{lr}-s0", 0, "none", games("10"), overrides=[f"trainer.lr={lr}"])
    assert not [n for n in compared(tmp_path).notes if ALIKE in n or n == DIFFER]
    craft(
        tmp_path,
        repo,
        "plain-s0",
        0,
        "none",
        games("10"),
        overrides=["trainer.lr=1e-4", "eval.at_start=true"],
    )
    assert [n for n in compared(tmp_path).notes if ALIKE in n] == [
        "lr1e-4 and plain trained alike in seed 0: the same environment, policy, trainer and warm start, and "
        "the same scaffold history (the same versions at the same steps, or none), so there they are one "
        "result, not two (`pats scaffold CELL` shows a cell's versions)."
    ]  # the evaluation settings are not training's
