"""`pats compare`'s untrained row (each seed's evaluation before training, eval.at_start, shared between
the conditions of a seed only where it is the same evaluation), repeated baselines with the number of
comparisons, and the curves: each seed faint, the mean bold, integer steps (issue 49)."""

from __future__ import annotations

import math

import pytest
from test_compare import craft
from test_compare_pairing import compared, games

from pats.compare import read_run, run_dirs
from pats.compare.output import csv_text, curves_figure, markdown
from pats.errors import PrerequisiteError
from pats.stats import crossed_difference, crossed_rate

START = {0: games("100000"), 1: games("010000")}  # each seed's untrained policy
FINAL = {"grpo": {0: games("110000"), 1: games("011000")}, "pats": {0: games("111100"), 1: games("011110")}}


def campaign(root, repo, at_start_in=("grpo",), pats_overrides=()):
    """grpo and pats, seeds 0 and 1; the untrained policy evaluated in `at_start_in`'s cells only."""
    for condition, mode, overrides in (("grpo", "none", ()), ("pats", "pats", pats_overrides)):
        for seed in (0, 1):
            craft(
                root, repo, f"{condition}-s{seed}", seed, mode, FINAL[condition][seed],
                at_start=START[seed] if condition in at_start_in else None, overrides=overrides,
            )  # fmt: skip


def test_the_untrained_row_takes_each_seeds_evaluation_before_training_from_the_cell_that_has_one(
    tmp_path, repo
):
    campaign(tmp_path, repo)
    result = compared(tmp_path, "untrained")
    rows = {r.condition: r for r in result.rows}
    assert list(rows) == ["grpo", "pats", "untrained"]
    untrained = rows["untrained"]
    assert (untrained.seeds, untrained.games, untrained.design) == ((0, 1), ((0, 6), (1, 6)), "crossed")
    assert untrained.heldout == crossed_rate(START) and untrained.scaffold_mode == "-"
    assert untrained.heldout_with_scaffold is None and math.isnan(untrained.train_success)
    # paired like the rest: per seed, on the same games, each condition against the untrained policy
    diffs = {d.condition: d.difference for d in result.differences}
    assert diffs == {c: crossed_difference(FINAL[c], START) for c in ("grpo", "pats")}
    assert diffs["pats"].per_seed == ((0, 0.5), (1, 0.5))
    assert (
        "untrained: each seed's evaluation of the untrained policy before training (eval.at_start), from "
        "grpo's cells, shared with pats: the same policy (policy.model, policy.init_adapter and the rest "
        "of the policy section), games, episodes and sampling seed." in result.notes
    )
    assert "| untrained | - | 0, 1 | - | 6 per seed | 0.167 [" in markdown(result)


def test_a_run_evaluated_only_before_training_has_no_held_out_outcomes(tmp_path, repo):
    run = craft(tmp_path, repo, "pats-s0", 0, "pats", None, at_start=START[0], steps=[{"train/success": 0.5}])
    record = read_run(run)
    before = {g: tuple(v) for g, v in START[0].items()}
    assert (record.heldout, record.eval_step, record.at_start) == ({}, None, before)


def test_untrained_evaluations_of_another_policy_are_not_shared(tmp_path, repo):
    # pats starts from an adapter grpo does not: grpo's at-start evaluations are not pats' starting point.
    campaign(tmp_path, repo, pats_overrides=("policy.init_adapter=/adapters/warm",))
    result = compared(tmp_path)
    assert [r.condition for r in result.rows] == ["grpo", "pats", "untrained (grpo)"]
    assert (
        "The cells start from 2 different untrained policies (grpo against pats: policy.init_adapter "
        "differs): an at-start evaluation is shared only among cells of the same start." in result.notes
    )
    assert (
        "No untrained row for pats: none of its cells evaluated the untrained policy (eval.at_start), and "
        "the evaluations of grpo are of another start (policy.init_adapter differs), so they are not "
        "shared." in result.notes
    )
    # with its own at-start evaluations, pats gets a row of its own
    other = tmp_path / "own"
    campaign(
        other, repo, at_start_in=("grpo", "pats"), pats_overrides=("policy.init_adapter=/adapters/warm",)
    )
    result = compared(other)
    assert [r.condition for r in result.rows] == ["grpo", "pats", "untrained (grpo)", "untrained (pats)"]
    # and the same start in every cell gives one row, from the named baseline's cells first
    same = tmp_path / "same"
    campaign(same, repo, at_start_in=("grpo", "pats"))
    result = compared(same, "pats")
    assert [r.condition for r in result.rows] == ["grpo", "pats", "untrained"]
    assert any(
        n.startswith("untrained: each seed's evaluation") and "from pats's cells" in n for n in result.notes
    )


def test_repeated_baselines_give_each_comparison_once_and_count_them(tmp_path, repo, capsys):
    from pats.cli.main import main

    campaign(tmp_path, repo)
    result = compared(tmp_path, "grpo", "untrained")
    assert [(d.baseline, d.condition) for d in result.differences] == [
        ("grpo", "pats"),
        ("grpo", "untrained"),
        ("untrained", "pats"),  # untrained minus grpo is shown once, against grpo
    ]
    assert (
        "3 comparisons (the differences above): each interval is 95% for its own comparison, not for "
        "all 3 at once; no correction for multiple comparisons is made, so by chance about 1 in 20 such "
        "intervals misses its true difference." in result.notes
    )
    text = markdown(result)
    assert "## Held-out success (no scaffold) against grpo" in text
    assert "## Held-out success (no scaffold) against untrained" in text
    rows = csv_text(result).splitlines()
    assert len(rows) == 1 + 3 * 2  # a row per condition and baseline
    assert main(["compare", str(tmp_path), "--baseline", "grpo", "--baseline", "untrained",
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    assert "against untrained" in capsys.readouterr().out
    with pytest.raises(
        PrerequisiteError, match="--baseline nope is none of the conditions compared: grpo, pats, untrained"
    ):
        compared(tmp_path, "nope")


def test_curves_show_each_seed_faint_the_mean_bold_and_whole_steps(tmp_path, repo):
    campaign(tmp_path, repo)
    records = [read_run(d) for d in run_dirs([tmp_path])]
    fig = curves_figure(records)
    train = fig.axes[0]
    lines = [ln for ln in train.get_lines() if ln.get_label().startswith("pats")]
    seeds = [ln for ln in train.get_lines() if ln.get_label().startswith("_")]
    assert len(lines) == 1 and lines[0].get_linewidth() >= 2.0  # the mean, bold and in the legend
    assert len(seeds) == 4 and all((ln.get_alpha() or 1.0) <= 0.4 for ln in seeds)  # 2 conditions x 2 seeds
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in fig.axes[-1].get_xticks())
    # every label inside the figure (the x label once ran past its right edge and was cut off)
    renderer, box = fig.canvas.get_renderer(), fig.bbox
    for text in (fig.axes[-1].xaxis.label, fig.axes[0].title, *(ax.yaxis.label for ax in fig.axes)):
        extent = text.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0, text.get_text()


def test_a_start_is_the_policy_games_episodes_and_backend_not_the_scaffold_or_training(repo):
    from pats.compare.start import differing, start_of
    from pats.spec import load_spec

    def start(*overrides: str):
        return start_of(load_spec(repo / "experiments/quickstart.yaml", list(overrides)))

    base = start()
    # what a condition changes (scaffold, training) and the seed leave the untrained evaluation as it is
    assert differing(base, start("scaffold.mode=none", "trainer.lr=3e-4", "seed=5", "eval.every=2")) == []
    assert differing(
        base,
        start("policy.temperature=0.7", "environment.max_turns=9", "eval.num_tasks=4", "eval.greedy=true",
              "eval.samples_per_task=2", "policy.init_adapter=/adapters/warm"),
    ) == [
        "policy.init_adapter", "policy.temperature", "environment.max_turns",
        "eval.first_task / eval.num_tasks", "eval.samples_per_task", "eval.greedy",
    ]  # fmt: skip


def test_each_start_field_is_named_once(repo):
    from dataclasses import replace

    from pats.compare.start import differing, start_of
    from pats.spec import load_spec

    def start(*overrides: str):
        return start_of(load_spec(repo / "experiments/quickstart.yaml", list(overrides)))

    base = start()
    assert differing(base, start("policy.model=HuggingFaceTB/SmolLM2-360M-Instruct")) == ["policy.model"]
    assert differing(base, replace(base, backend="verl")) == ["trainer.backend"]  # a verl spec differs more
    assert differing(base, start("policy.temperature=0.7")) == ["policy.temperature"]
    # the same game parameters written in another order are the same start
    spec = load_spec(repo / "experiments/quickstart.yaml")
    params = spec.environment.params
    backwards = spec.environment.model_copy(update={"params": dict(reversed(params.items()))})
    assert list(backwards.params) != list(params)
    assert start_of(spec.model_copy(update={"environment": backwards})) == base


def test_three_starts_give_their_rows_and_notes_whole(tmp_path, repo):
    """Cells of three untrained policies (hot and hot2 sample hotter, warm starts from an adapter): a
    row per start with at-start evaluations, its source and what it is shared with; a start without
    any named with why, even when it comes first; and how the starts differ."""
    from pats.compare.untrained import untrained_rows

    hot, warm = "policy.temperature=0.7", "policy.init_adapter=/adapters/warm"
    made = [("hot", "pats", None, (hot,)), ("hot2", "none", None, (hot,)), ("grpo", "none", START[0], ()),
            ("pats", "pats", None, ()), ("warm", "pats", START[0], (warm,))]  # fmt: skip
    cells = [
        read_run(craft(tmp_path, repo, f"{name}-s0", 0, mode, FINAL["grpo"][0], at_start=at, overrides=o))
        for name, mode, at, o in made
    ]
    rows, notes = untrained_rows(cells, prefer=(), taken=("hot", "hot2", "grpo", "pats", "warm"))
    assert list(rows) == ["untrained (grpo, pats)", "untrained (warm)"]
    assert notes == [
        "No untrained row for hot, hot2: none of their cells evaluated the untrained policy (eval.at_start), "
        "and the evaluations of grpo are of another start (policy.temperature differs), so they are not "
        "shared, and the evaluations of warm are of another start (policy.init_adapter, policy.temperature "
        "differ), so they are not shared.",
        "untrained (grpo, pats): each seed's evaluation of the untrained policy before training "
        "(eval.at_start), from grpo's cells, shared with pats: the same policy (policy.model, "
        "policy.init_adapter and the rest of the policy section), games, episodes and sampling seed.",
        "untrained (warm): each seed's evaluation of the untrained policy before training (eval.at_start), "
        "from warm's cells.",
        "The cells start from 3 different untrained policies (hot, hot2 against grpo, pats: "
        "policy.temperature differs; hot, hot2 against warm: policy.init_adapter, policy.temperature "
        "differ): an at-start evaluation is shared only among cells of the same start.",
    ]
    (row,) = rows["untrained (warm)"]
    assert (row.condition, row.seed, row.heldout, row.heldout_source) == (
        "untrained (warm)", 0, {g: tuple(v) for g, v in START[0].items()}, "at start"
    )  # fmt: skip
    assert (row.eval_step, row.steps_done, row.steps_planned, row.scaffold_mode) == (-1, 0, 0, "-")
    assert (row.scaffold_entries, row.scaffold_tokens, row.edits, row.removals) == (0.0, 0.0, 0, 0)
    assert row.heldout_with_scaffold == {} and row.curves == {} and math.isnan(row.train_success)


def test_a_condition_named_untrained_keeps_its_name(tmp_path, repo):
    from pats.compare.untrained import untrained_rows

    cells = [read_run(craft(tmp_path, repo, "untrained-s0", 0, "none", FINAL["grpo"][0], at_start=START[0]))]
    rows, notes = untrained_rows(cells, prefer=(), taken=("untrained",))
    assert list(rows) == ["untrained at start"]
    assert notes == [
        "untrained at start: each seed's evaluation of the untrained policy before training "
        "(eval.at_start), from untrained's cells."
    ]
