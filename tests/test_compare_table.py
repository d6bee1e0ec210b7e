"""What `pats compare`'s table says about how it was made: the baseline note (named, chosen, none), the
refusals whole, and rows whose runs have no held-out outcomes or differ in scaffold mode (issue 49)."""

from __future__ import annotations

import pytest
from test_compare import craft
from test_compare_pairing import compared, games

from pats.compare import compare, read_run, run_dirs
from pats.compare.output import csv_text
from pats.errors import PrerequisiteError


@pytest.fixture
def two_conditions(tmp_path, repo):
    for seed in (0, 1):
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", games("1100"))
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", games("1000"))
    return tmp_path


def test_the_baseline_note_says_whether_it_was_named_or_chosen(two_conditions, repo):
    assert compared(two_conditions).notes[0] == (
        "Baseline: grpo, the one condition without a scaffold (--baseline names another)."
    )
    assert compared(two_conditions, "grpo").notes[0] == "Baseline: grpo (named)."
    assert compared(two_conditions, "grpo", "grpo").notes[0] == "Baseline: grpo (named)."
    assert compared(two_conditions, "grpo", "pats").notes[0] == "Baselines: grpo, pats (named)."
    craft(two_conditions, repo, "plain-s0", 0, "none", games("0000"))  # a second condition without a scaffold
    result = compared(two_conditions)
    assert result.notes[0] == "No baseline: name one with --baseline to get differences."
    assert (result.baselines, result.differences) == ((), ())
    assert not any("comparison" in n for n in result.notes)


def test_the_number_of_comparisons_is_said_with_what_the_intervals_cover(two_conditions, repo):
    assert compared(two_conditions, "grpo").notes[-1] == (
        "1 comparison (the difference above): its interval is 95% for that comparison."
    )
    craft(two_conditions, repo, "plain-s0", 0, "none", games("0000"))
    assert compared(two_conditions, "grpo").notes[-1] == (
        "2 comparisons (the differences above): each interval is 95% for its own comparison, not for both "
        "at once; no correction for multiple comparisons is made, so by chance about 1 in 20 such intervals "
        "misses its true difference."
    )


def test_the_refusals_read_whole(two_conditions, tmp_path, repo):
    with pytest.raises(PrerequisiteError) as err:
        compared(two_conditions, "nope")
    assert str(err.value) == "--baseline nope is none of the conditions compared: grpo, pats"
    twin = craft(tmp_path / "elsewhere", repo, "pats-s0", 0, "pats", games("1111"))
    with pytest.raises(PrerequisiteError) as err:
        compare([read_run(d) for d in run_dirs([two_conditions, twin])])
    assert str(err.value) == (
        f"two runs of condition pats with seed 0: {two_conditions / 'pats-s0'} and {twin}; give one of them "
        "(a condition is a run's name without its -s<seed>)"
    )


def test_a_condition_without_held_out_outcomes_has_an_empty_row(tmp_path, repo):
    craft(tmp_path, repo, "late-s0", 0, "pats", None)
    (row,) = compared(tmp_path).rows
    assert (row.heldout, row.design, row.games, row.episodes) == (None, None, (), 0)
    line = csv_text(compared(tmp_path)).splitlines()[1].split(",")
    assert line[4:7] == ["", "0", ""]  # games, episodes, design


def test_a_condition_whose_seeds_ran_different_scaffold_modes_names_both(tmp_path, repo):
    craft(tmp_path, repo, "mixed-s0", 0, "pats", games("10"))
    craft(tmp_path, repo, "mixed-s1", 1, "none", games("01"))
    (row,) = compared(tmp_path).rows
    assert row.scaffold_mode == "none/pats"
