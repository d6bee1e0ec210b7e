"""`pats compare`'s table files read whole (pats.compare.output's markdown and csv_text): three
conditions, one of them never evaluated on held-out games; a baseline with no difference to show; a
comparison without a baseline; and one condition. Every number in them was checked by hand against
the crafted runs (see the comments)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_compare import ALL, ZERO, A, craft

from pats.compare import compare, read_run, run_dirs
from pats.compare.output import INTERVALS, csv_text, markdown

# pats: seed 0 (train success 0.2, 0.4; ADD 2, UPDATE 1, DELETE 1; 3 entries and 40 tokens at the end),
# seed 1 (0.4, 0.6; 5 entries, 60 tokens), so 0.400, 4.0, 50.0, 2.0 edits and 0.5 removals over seeds;
# informative groups, groups shown a plan and prompt tokens reported by seed 0 only. grpo: no scaffold, 0 of 2 games won in
# each seed (Wilson [0, 0.658]). late: never evaluated on held-out games, and without a scaffold, as
# grpo: the two trained alike (a note says so). The intervals of pats are
# those of test_compare's hand computation.
STEPS = {
    0: [{"train/success": 0.2, "edits/ADD": 2.0, "edits/DELETE": 1.0, "scaffold/entries": 1.0,
         "train/prompt_tokens": 120.0},
        {"train/success": 0.4, "edits/UPDATE": 1.0, "scaffold/entries": 3.0, "scaffold/tokens": 40.0,
         "train/informative_fraction": 0.5, "coverage/plan_fraction": 0.25}],
    1: [{"train/success": 0.4}, {"train/success": 0.6, "scaffold/entries": 5.0, "scaffold/tokens": 60.0}],
}  # fmt: skip

TABLE = """\
# Comparison of 3 conditions

| condition | scaffold | seeds | steps | held-out games | held-out success, no scaffold | with scaffold | reliance gap (with - without) | train success | informative groups | shown a plan | prompt tokens | scaffold entries | scaffold tokens | edits | removals |
| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| grpo | none | 0, 1 | 3/3 | 2 per seed | 0.000 [0.000, 0.658] | - | - | 0.500 | - | - | - | 0.0 | 0.0 | 0.0 | 0.0 |
| late | none | 0 | 3/3 | - | - | - | - | 0.500 | - | - | - | 0.0 | 0.0 | 0.0 | 0.0 |
| pats | pats | 0, 1 | 2/3 | 2 per seed | 0.750 [0.000, 1.000] | 1.000 [0.342, 1.000] | +0.250 [+0.000, +1.000] | 0.400 | 0.500 | 0.250 | 120.0 | 4.0 | 50.0 | 2.0 | 0.5 |
"""

AGAINST_GRPO = """
## Held-out success (no scaffold) against grpo

| condition | minus grpo | design | games | per seed |
| --- | --- | --- | --- | --- |
| pats | +0.750 [+0.000, +1.000] | crossed | 2 per seed | s0 +0.500, s1 +1.000 |
"""

LEGEND = f"""
Held-out success: the runs' last evaluation (the final checkpoint), episodes pooled; untrained: each seed's evaluation before training; held-out games: the games each seed contributed to the interval; train success, informative groups (groups whose rewards differ), shown a plan (groups whose view held a plan of their task; - for runs logged before pats counted it) and prompt tokens: means over the steps; scaffold size: after the last step; edits and removals: totals over the run; all averaged over seeds.

{INTERVALS}

"""

NOTES = """\
- Baseline: grpo (named).
- No untrained row for grpo, late, pats: none of their cells evaluated the untrained policy (eval.at_start).
- late: no run of seed 1 (other conditions have it); its row rests on no seed.
- grpo and late trained alike in seed 0: the same environment, policy, trainer and warm start, and the same scaffold history (the same versions at the same steps, or none), so there they are one result, not two (`pats scaffold CELL` shows a cell's versions).
- Host not recorded for grpo-s0, grpo-s1, late-s0, pats-s0, pats-s1 (run before pats wrote host.json): which machine each ran on is not known.
- late-s0: no held-out evaluation of a trained checkpoint with per-game outcomes; left out of the intervals.
- pats-s0: 2 of 3 steps done (still going or stopped).
- pats-s1: 2 of 3 steps done (still going or stopped).
- The runs' last evaluations measured different steps' checkpoints: [1, 2].
- 1 comparison (the difference above): its interval is 95% for that comparison.
"""

HEADER = (
    "condition,scaffold_mode,seeds,steps,games,episodes,design,heldout,heldout_lo,heldout_hi,with_scaffold,"
    "with_scaffold_lo,with_scaffold_hi,reliance_gap,reliance_gap_lo,reliance_gap_hi,train_success,"
    "informative_fraction,plan_fraction,prompt_tokens,scaffold_entries,scaffold_tokens,edits,removals,baseline,"
    "minus_baseline,minus_baseline_lo,minus_baseline_hi,minus_baseline_design\n"
)
ROWS = [  # each row's columns up to the baseline's (which the cases below add)
    "grpo,none,0 1,3/3,0:2 1:2,4,crossed,0.0,0.0,0.6576280471103807,,,,,,,0.5,nan,nan,nan,0.0,0.0,0.0,0.0,",
    "late,none,0,3/3,,0,,,,,,,,,,,0.5,nan,nan,nan,0.0,0.0,0.0,0.0,",
    "pats,pats,0 1,2/3,0:2 1:2,4,crossed,0.75,0.0,1.0,1.0,0.34237195288961925,1.0,0.25,0.0,1.0,0.4,0.5,0.25,120.0,"
    "4.0,50.0,2.0,0.5,",
]


@pytest.fixture
def compared(tmp_path, repo: Path):
    for seed in (0, 1):
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", A[seed], ALL, STEPS[seed])
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", ZERO)
    craft(tmp_path, repo, "late-s0", 0, "none", None)
    return compare([read_run(d) for d in run_dirs([tmp_path])], ["grpo"])


def test_the_markdown_table_whole(compared):
    assert markdown(compared) == TABLE + AGAINST_GRPO + LEGEND + NOTES
    # a baseline none of whose differences are shown (here: none computed) gets no section, the next does
    assert markdown(replace(compared, baselines=("late", "grpo"))) == TABLE + AGAINST_GRPO + LEGEND + NOTES
    assert markdown(replace(compared, baselines=(), differences=())) == TABLE + LEGEND + NOTES


def test_the_csv_whole(compared):
    grpo, late, pats = ROWS
    assert csv_text(compared) == HEADER + "".join(
        [grpo + "grpo,,,,\n", late + "grpo,,,,\n", pats + "grpo,0.75,0.0,1.0,crossed\n"]
    )
    assert csv_text(replace(compared, baselines=(), differences=())) == HEADER + "".join(
        row + ",,,,\n" for row in ROWS
    )


def test_one_condition_is_said_in_the_singular(tmp_path, repo):
    one = compare([read_run(craft(tmp_path, repo, "grpo-s0", 0, "none", ZERO))])
    assert markdown(one).startswith("# Comparison of 1 condition\n\n| condition |")
