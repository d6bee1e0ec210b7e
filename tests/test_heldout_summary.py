"""The lines a run ends with: held-out success of the untrained policy beside the last checkpoint's on
the same games, and what the run can and cannot show, read from the difference's interval."""

from __future__ import annotations

from pathlib import Path

from pats.engine.summary import heldout_summary
from pats.logging.events import EventLog
from pats.spec import load_spec
from pats.stats import hierarchical_difference, hierarchical_rate


def run_with(tmp_path: Path, repo: Path, start: dict | None, end: dict, steps: int = 3):
    spec = load_spec(repo / "experiments/quickstart.yaml", [f"trainer.steps={steps}"])
    log = EventLog(tmp_path / "events.jsonl")
    if start is not None:
        log.write(-1, "eval", metrics={}, outcomes=start)
    for step in range(steps):
        log.end_step(step, metrics={})
    log.write(steps - 1, "eval", metrics={}, outcomes=end)
    log.close()
    return spec, tmp_path


def games(wins: list[int], episodes: int = 4) -> dict[str, list[float]]:
    return {f"g{i}": [1.0] * w + [0.0] * (episodes - w) for i, w in enumerate(wins)}


def test_the_untrained_policy_beside_the_trained_one_and_what_3_steps_cannot_show(tmp_path, repo):
    before, after = games([1, 2, 0, 1, 2, 1, 0, 1]), games([2, 1, 1, 1, 2, 1, 0, 2])
    spec, run_dir = run_with(tmp_path, repo, before, after)
    first, second = heldout_summary(spec, run_dir)
    rate_before, rate_after = hierarchical_rate({0: before}), hierarchical_rate({0: after})
    diff = hierarchical_difference({0: after}, {0: before}).interval
    assert diff.lo < 0 < diff.hi  # 8 vs 10 of 32 episodes: the interval holds 0
    assert first == (
        "held-out success without the scaffold (8 games, 4 episodes per game, sampled at temperature 1): "
        f"untrained {rate_before.fmt()}, after step 2 {rate_after.fmt()}; difference "
        f"{diff.fmt(signed=True)} (95%, bootstrap over games)"
    )
    assert second == (
        "What 3 steps can show: that every stage ran (rollouts, evidence cards, scaffold edits, policy "
        "updates, held-out play). What 3 steps cannot: whether training changed held-out success: the "
        "difference's interval holds 0 on 8 games of one seed."
    )


def test_a_difference_that_excludes_0_still_speaks_for_one_seed_only(tmp_path, repo):
    spec, run_dir = run_with(tmp_path, repo, games([0] * 8), games([4] * 8))
    assert "that another seed would move the same way" in heldout_summary(spec, run_dir)[1]


def test_evaluations_that_ended_the_same_way_say_their_interval_says_nothing(tmp_path, repo):
    spec, run_dir = run_with(tmp_path, repo, games([0, 0]), games([0, 0]), steps=1)
    first, second = heldout_summary(spec, run_dir)
    assert "difference +0.000 [+0.000, +0.000]" in first
    assert second.startswith("What 1 step can show: that every stage ran")
    assert (
        "What 1 step cannot: whether training changed held-out success: every game ended the same way"
        in second
    )


def test_without_an_evaluation_before_training_it_says_how_to_get_one(tmp_path, repo):
    spec, run_dir = run_with(tmp_path, repo, None, games([1, 0]))
    first, second = heldout_summary(spec, run_dir)
    assert first.endswith(f"after step 2 {hierarchical_rate({0: games([1, 0])}).fmt()}")
    assert "eval.at_start: true adds one" in second
    assert heldout_summary(spec, tmp_path / "nowhere") == []


def test_the_last_trained_evaluation_with_outcomes_is_the_one_reported(tmp_path, repo):
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.greedy=true", "eval.samples_per_task=1"],
    )
    log = EventLog(tmp_path / "events.jsonl")
    log.write(-1, "eval", metrics={}, outcomes={})  # an evaluation without per-game outcomes: not one
    log.end_step(0, metrics={})
    log.write(0, "eval", metrics={}, outcomes=games([0, 0], episodes=1))
    log.end_step(1, metrics={})
    log.write(1, "eval", metrics={}, outcomes=games([1, 1, 0], episodes=1))
    log.write(1, "eval", metrics={}, outcomes={})
    log.close()
    first, second = heldout_summary(spec, tmp_path)
    rate = hierarchical_rate({0: games([1, 1, 0], episodes=1)})
    assert first == (
        f"held-out success without the scaffold (3 games, 1 episode per game, greedy): after step 1 {rate.fmt()}"
    )
    assert second == (
        "What 2 steps can show: that every stage ran. What 2 steps cannot: whether training changed held-out "
        "success, since there is no evaluation of the untrained policy to compare with (eval.at_start: true "
        "adds one)."
    )


def test_only_an_evaluation_before_training_gives_no_lines(tmp_path, repo):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["trainer.steps=1"])
    log = EventLog(tmp_path / "events.jsonl")
    log.write(-1, "eval", metrics={}, outcomes=games([1, 0]))
    log.close()
    assert heldout_summary(spec, tmp_path) == []


def test_what_a_run_cannot_show_reads_whole(tmp_path, repo):
    spec, run_dir = run_with(tmp_path / "a", repo, games([0] * 8), games([4] * 8))
    assert heldout_summary(spec, run_dir)[1] == (
        "What 3 steps can show: that every stage ran (rollouts, evidence cards, scaffold edits, policy updates, "
        "held-out play). What 3 steps cannot: that another seed would move the same way: the interval excludes "
        "0 on these 8 games, for this seed only (pats sweep --seeds 0-3, then pats compare)."
    )
    spec, run_dir = run_with(tmp_path / "b", repo, games([0, 0]), games([0, 0]), steps=1)
    assert heldout_summary(spec, run_dir)[1] == (
        "What 1 step can show: that every stage ran (rollouts, evidence cards, scaffold edits, policy updates, "
        "held-out play). What 1 step cannot: whether training changed held-out success: every game ended the "
        "same way in both evaluations, so the interval has no width and says nothing (2 games; more games or "
        "episodes per game)."
    )


def test_two_episodes_per_game_read_plural(tmp_path, repo):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["trainer.steps=1", "eval.samples_per_task=2"])
    log = EventLog(tmp_path / "events.jsonl")
    log.end_step(0, metrics={})
    log.write(0, "eval", metrics={}, outcomes=games([1, 0], episodes=2))
    log.close()
    assert heldout_summary(spec, tmp_path)[0].startswith(
        "held-out success without the scaffold (2 games, 2 episodes per game, sampled at temperature 1):"
    )


def test_an_interval_with_an_end_at_0_holds_0(tmp_path, repo):
    # one game of 8 won once more (or once less) after training, no other change: a resample without
    # that game gives 0, so one end of the interval is 0
    before = games([1, 2, 0, 1, 2, 1, 0, 1])
    for after, end in ((games([2, 2, 0, 1, 2, 1, 0, 1]), "lo"), (games([0, 2, 0, 1, 2, 1, 0, 1]), "hi")):
        spec, run_dir = run_with(tmp_path / end, repo, before, after)
        assert getattr(hierarchical_difference({0: after}, {0: before}).interval, end) == 0.0
        assert heldout_summary(spec, run_dir)[1].endswith(
            "cannot: whether training changed held-out success: the difference's interval holds 0 on 8 "
            "games of one seed."
        )
