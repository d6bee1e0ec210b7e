"""What `pats compare`'s intervals rest on: the design (crossed or nested) decided on the games actually
paired, the games each seed contributed, mixed game counts restricted to the shared games, seeds
missing on either side named, and runs paired by seed id, never by position (issue 49)."""

from __future__ import annotations

from pathlib import Path

from test_compare import craft

from pats.compare import compare, read_run, run_dirs
from pats.compare.output import markdown
from pats.stats import crossed_difference, crossed_rate, hierarchical_rate


def games(wins: str, prefix: str = "g") -> dict[str, list[float]]:
    """One episode per game: wins[i] == "1" wins game <prefix><i>."""
    return {f"{prefix}{i}": [float(c == "1")] for i, c in enumerate(wins)}


def first(outcomes: dict[str, list[float]], n: int) -> dict[str, list[float]]:
    return {g: outcomes[g] for g in list(outcomes)[:n]}


def compared(root: Path, *baselines: str):
    return compare([read_run(d) for d in run_dirs([root])], list(baselines) or None)


def test_a_larger_evaluation_of_one_cell_keeps_the_crossed_design_on_the_shared_games(tmp_path, repo):
    # `pats eval CELL --tasks 12` on pats-s0 only: that seed has 12 games, every other cell the first 6.
    pats0, pats1 = games("110100101101"), games("011010")
    grpo0, grpo1 = games("010000"), games("001000")
    craft(tmp_path, repo, "pats-s0", 0, "pats", pats0)
    craft(tmp_path, repo, "pats-s1", 1, "pats", pats1)
    craft(tmp_path, repo, "grpo-s0", 0, "none", grpo0)
    craft(tmp_path, repo, "grpo-s1", 1, "none", grpo1)
    result = compared(tmp_path, "grpo")
    row = next(r for r in result.rows if r.condition == "pats")
    shared = {0: first(pats0, 6), 1: pats1}
    assert row.design == "crossed" and row.heldout == crossed_rate(shared)
    assert (row.games, row.episodes) == (((0, 6), (1, 6)), 12)  # not "12 games" over 18 pooled
    (diff,) = result.differences
    assert diff.difference.design == "crossed" and diff.difference.games == ((0, 6), (1, 6))
    assert diff.difference == crossed_difference(shared, {0: grpo0, 1: grpo1})
    assert any(
        n.startswith(
            "pats: seeds played different held-out games (s0 12, s1 6); its intervals use the 6 games"
        )
        for n in result.notes
    )
    assert "| pats | pats | 0, 1 | 3/3 | 6 per seed |" in markdown(result)


def test_the_baselines_larger_evaluation_on_one_seed_still_pairs_crossed(tmp_path, repo):
    # grpo-s1 was evaluated on 12 games, the rest on 6: the difference pairs the 6 every cell played.
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("110100"))
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("011010"))
    craft(tmp_path, repo, "grpo-s0", 0, "none", games("010000"))
    craft(tmp_path, repo, "grpo-s1", 1, "none", games("001000111111"))
    result = compared(tmp_path, "grpo")
    (diff,) = result.differences
    assert diff.difference.design == "crossed" and diff.difference.games == ((0, 6), (1, 6))
    assert any(
        n.startswith("pats minus grpo: on the 6 games every seed of both played") for n in result.notes
    )


def test_seeds_on_their_own_games_stay_nested_and_each_seeds_games_are_said(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", games("110100101101"))
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("011010", prefix="h"))
    result = compared(tmp_path)
    (row,) = result.rows
    assert row.design == "nested" and row.games == ((0, 12), (1, 6)) and row.episodes == 18
    assert row.heldout == hierarchical_rate({0: games("110100101101"), 1: games("011010", prefix="h")})
    assert "| pats | pats | 0, 1 | 3/3 | s0 12, s1 6 |" in markdown(result)
    assert not any("different held-out games" in n for n in result.notes)  # nothing left out


def test_seeds_that_share_some_games_but_none_in_common_are_said_to_risk_a_narrow_interval(tmp_path, repo):
    craft(tmp_path, repo, "pats-s0", 0, "pats", {"a": [1.0], "b": [0.0]})
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"b": [1.0], "c": [0.0]})
    craft(tmp_path, repo, "pats-s2", 2, "pats", {"c": [1.0], "a": [0.0]})
    result = compared(tmp_path)
    assert result.rows[0].design == "nested"
    assert any(
        n.startswith("pats: no game is shared by every seed, yet some seeds share games")
        for n in result.notes
    )


def test_differences_pair_runs_by_seed_id_with_seeds_missing_on_either_side(tmp_path, repo):
    # pats has seeds 1, 2 and 4 (seed 4 not evaluated yet); grpo 0, 1, 2 and 3. Paired: 1 and 2 only,
    # each with its own seed's baseline: positional pairing would give other per-seed differences.
    craft(tmp_path, repo, "pats-s1", 1, "pats", games("1111"))
    craft(tmp_path, repo, "pats-s2", 2, "pats", games("1100"))
    craft(tmp_path, repo, "pats-s4", 4, "pats", None, steps=[{"train/success": 0.5}])
    for seed, wins in ((0, "1111"), (1, "1000"), (2, "0000"), (3, "1111")):
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", games(wins))
    result = compared(tmp_path, "grpo")
    (diff,) = result.differences
    assert diff.difference.per_seed == ((1, 0.75), (2, 0.5))
    assert diff.difference.games == ((1, 4), (2, 4))
    notes = "\n".join(result.notes)
    assert "pats: no run of seeds 0, 3 (other conditions have them); its row rests on seeds 1, 2." in notes
    assert "grpo: no run of seed 4 (other conditions have it); its row rests on seeds 0, 1, 2, 3." in notes
    assert (
        "pats minus grpo: paired on seeds 1, 2 only (seeds 0, 3: only grpo has held-out outcomes; "
        "seed 4: neither has held-out outcomes)." in notes
    )
    assert "| pats | +0.625 [" in markdown(result)
