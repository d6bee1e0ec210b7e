"""Evidence cards and failure detection on hand-made rollout groups, with the real policy tokenizer."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from pats.cards import FAILURE_MODES, FailureData, build_cards, detect_failures
from pats.testing import card_facts
from pats.types import EvidenceCard, Rollout, RolloutGroup, Task, Turn

ALL = ("outcome", "contrast", "failure", "utility", "expert")
CAP = 256


def turn(action: str, **kw) -> Turn:
    kw.setdefault("prompt_tokens", 100)
    kw.setdefault("response_tokens", 10)
    return Turn(observation=kw.pop("observation", "You are in a room."), action=action, **kw)


def rollout(
    rid: str, actions, reward: float = 0.0, success: bool = False, scaffolded: bool = True, **kw
) -> Rollout:
    turns = tuple(a if isinstance(a, Turn) else turn(a) for a in actions)
    return Rollout(
        id=rid,
        task_id="t1",
        scaffolded=scaffolded,
        scaffold_version="v1",
        turns=turns,
        reward=reward,
        success=success,
        **kw,
    )


def group(*rollouts: Rollout, step: int = 3) -> RolloutGroup:
    task = Task(id="t1", type="twc", split="train", env="textworld")
    return RolloutGroup(step=step, task=task, scaffold_version="v1", rollouts=rollouts)


def by_type(cards):
    return {c.type: c for c in cards}


@pytest.fixture
def mixed() -> RolloutGroup:
    """One success among four; r3 is a probe run without the scaffold."""
    return group(
        rollout("r0", ["go north", "take key", "open door"], reward=1.0, success=True),
        rollout("r1", ["go north", "take key", "go west", "go east", "go west"]),
        rollout("r2", ["look", "look", "go west", "go east", "go west"]),
        rollout("r3", ["go south", "inventory", "look", "wait"], scaffolded=False),
    )


# outcome


def test_outcome_mixed(mixed, count_tokens):
    card = build_cards(mixed, ["outcome"], count_tokens, CAP)[0]
    assert card.data.model_dump(mode="json") == {
        "type": "outcome",
        "n": 4,
        "n_scaffolded": 3,
        "n_probes": 1,
        "successes": 1,
        "success_rate": 0.25,
        "reward_mean": 0.25,
        "reward_std": pytest.approx(math.sqrt(0.1875)),
        "all_failed": False,
        "all_passed": False,
        "turns_mean": 4.25,
        "prompt_tokens_mean": 425.0,
        "response_tokens_mean": 42.5,
        "winning_actions": ["go north", "take key", "open door"],
    }
    assert card.id == "c3-t1-outcome"
    assert (card.step, card.task_id, card.task_type, card.scaffold_version) == (3, "t1", "twc", "v1")
    assert not card.privileged
    assert card.text.splitlines()[0] == "[c3-t1-outcome] task t1 (twc) | scaffold v1"
    assert "successes 1 (rate 0.25)" in card.text
    assert "std 0.433" in card.text
    assert "won with: go north | take key | open door" in card.text


def test_outcome_all_failed_and_all_passed(count_tokens):
    failed = group(rollout("a", ["look"]), rollout("b", ["look"]))
    passed = group(rollout("a", ["look"], 1.0, True), rollout("b", ["look", "wait"], 0.5, True))
    f = build_cards(failed, ["outcome"], count_tokens, CAP)[0].data
    p = build_cards(passed, ["outcome"], count_tokens, CAP)[0].data
    assert (f.all_failed, f.all_passed, f.success_rate, f.reward_std) == (True, False, 0.0, 0.0)
    assert (p.all_failed, p.all_passed, p.success_rate) == (False, True, 1.0)
    assert p.reward_mean == 0.75
    assert p.reward_std == 0.25
    assert p.turns_mean == 1.5


# contrast


def test_contrast_mixed(mixed, count_tokens):
    data = build_cards(mixed, ["contrast"], count_tokens, CAP)[0].data
    # Worst: reward 0 and most turns (r1, r2 tie at 5) -> the first of them, r1.
    assert data.best.model_dump(mode="json") == {
        "rollout_id": "r0",
        "reward": 1.0,
        "success": True,
        "turns": 3,
        "actions": ["go north", "take key", "open door"],
    }
    assert data.worst.rollout_id == "r1"
    assert data.worst.turns == 5
    assert data.diverge_turn == 2
    assert data.best_action_at_diverge == "open door"
    assert data.worst_action_at_diverge == "go west"
    assert data.same_reward is False


def test_contrast_ties_prefer_fewest_turns_for_best(count_tokens):
    g = group(
        rollout("long", ["a", "b", "c"], 1.0, True),
        rollout("short", ["a", "c"], 1.0, True),
        rollout("bad", ["a"], 0.0),
    )
    data = build_cards(g, ["contrast"], count_tokens, CAP)[0].data
    assert (data.best.rollout_id, data.worst.rollout_id) == ("short", "bad")
    # The worst ended at turn 1, where the best still acted.
    assert (data.diverge_turn, data.best_action_at_diverge, data.worst_action_at_diverge) == (
        1,
        "c",
        None,
    )


def test_contrast_identical_rollouts(count_tokens):
    g = group(rollout("a", ["look", "wait"]), rollout("b", ["Look", "wait"]))
    card = build_cards(g, ["contrast"], count_tokens, CAP)[0]
    # Everything ties: best is the first, the worst is taken from the others.
    assert (card.data.best.rollout_id, card.data.worst.rollout_id) == ("a", "b")
    assert card.data.diverge_turn is None
    assert card.data.best_action_at_diverge is None
    assert card.data.same_reward is True
    assert "identical actions (same reward)" in card.text


def test_no_contrast_for_one_rollout(count_tokens):
    g = group(rollout("a", ["look"]))
    assert [c.type for c in build_cards(g, ["outcome", "contrast"], count_tokens, CAP)] == ["outcome"]


# failure


def test_failure_card_counts_rollouts_not_turns(count_tokens):
    g = group(
        rollout("clean", ["go north", "open door"], 1.0, True),
        rollout(
            "bad",
            [turn("fly", valid=False, invalid_reason="unknown verb"), turn("swim", valid=False), "look"],
        ),
        rollout("stuck", ["a", "b", "a", "b"], truncated=True),
        rollout("crash", ["look", "look"], error="env timeout"),
    )
    data = build_cards(g, ["failure"], count_tokens, CAP)[0].data
    assert data.counts == {
        "invalid_action": 1,
        "repeated_action": 1,
        "loop": 1,
        "out_of_turns": 1,
        "malformed_output": 0,
        "env_error": 1,
    }
    assert data.failed_rollouts == 3
    assert [e.mode for e in data.examples] == [
        "invalid_action",
        "repeated_action",
        "loop",
        "out_of_turns",
        "env_error",
    ]
    assert data.examples[0].model_dump() == {
        "mode": "invalid_action",
        "rollout_id": "bad",
        "turn": 0,
        "excerpt": "fly -> unknown verb",
    }


def test_failure_card_on_clean_group(count_tokens):
    g = group(rollout("a", ["go north", "open door"], 1.0, True), rollout("b", ["look"]))
    card = build_cards(g, ["failure"], count_tokens, CAP)[0]
    assert card.data.model_dump(mode="json") == {
        "type": "failure",
        "counts": dict.fromkeys(FAILURE_MODES, 0),
        "examples": [],
        "failed_rollouts": 1,
    }
    assert "no failure mode detected" in card.text


# utility


def test_utility_with_probes(mixed, count_tokens):
    data = build_cards(mixed, ["utility"], count_tokens, CAP)[0].data
    assert data.model_dump(mode="json") == {
        "type": "utility",
        "n_with": 3,
        "n_without": 1,
        "success_with": pytest.approx(1 / 3),
        "success_without": 0.0,
        "reward_with": pytest.approx(1 / 3),
        "reward_without": 0.0,
        "delta": pytest.approx(1 / 3),
    }


def test_utility_negative_delta(count_tokens):
    g = group(
        rollout("s0", ["look"]),
        rollout("s1", ["look"], 0.5),
        rollout("p0", ["look"], 1.0, True, scaffolded=False),
        rollout("p1", ["look"], scaffolded=False),
    )
    card = build_cards(g, ["utility"], count_tokens, CAP)[0]
    assert (card.data.success_with, card.data.success_without, card.data.delta) == (0.0, 0.5, -0.5)
    assert (card.data.reward_with, card.data.reward_without) == (0.25, 0.5)
    assert "success delta: -0.5" in card.text


def test_no_utility_without_probes_or_without_scaffold(count_tokens):
    scaffolded = group(rollout("a", ["look"], 1.0, True), rollout("b", ["look"]))
    probes = group(rollout("a", ["look"], scaffolded=False), rollout("b", ["look"], scaffolded=False))
    assert build_cards(scaffolded, ["utility"], count_tokens, CAP) == []
    assert build_cards(probes, ["utility"], count_tokens, CAP) == []


# expert


def test_expert_card(count_tokens):
    plan = ["go north", "take key", "unlock door", "open door"]
    g = group(
        rollout("win", plan, 1.0, True),
        rollout("near", ["go north", "take key", "go west", "open door"]),
        rollout("far", ["go north", "look"]),
    )
    card = build_cards(g, ["expert"], count_tokens, CAP, expert_plan=plan)[0]
    assert card.privileged
    assert card.id == "c3-t1-expert"
    assert card.data.model_dump(mode="json") == {
        "type": "expert",
        "plan": plan,
        "followed": {"win": 4, "near": 2, "far": 1},
        "first_departure": {"rollout_id": "near", "turn": 2, "expected": "unlock door", "taken": "go west"},
        "followed_fraction_mean": pytest.approx(7 / 12),
    }
    assert card.text.splitlines()[1].startswith("PRIVILEGED")


def test_expert_departure_none_when_no_failed_rollout_left_the_plan(count_tokens):
    plan = ["go north", "open door"]
    g = group(rollout("a", plan, 1.0, True), rollout("b", ["look"], 1.0, True))
    data = build_cards(g, ["expert"], count_tokens, CAP, expert_plan=plan)[0].data
    assert data.first_departure is None
    assert data.followed == {"a": 2, "b": 0}
    assert data.followed_fraction_mean == 0.5


def test_expert_needs_a_plan(mixed, count_tokens):
    assert build_cards(mixed, ["expert"], count_tokens, CAP) == []
    assert build_cards(mixed, ["expert"], count_tokens, CAP, expert_plan=[]) == []


# selection, order, determinism, size


def test_switched_off_types_do_not_appear_and_order_follows_types(mixed, count_tokens):
    cards = build_cards(mixed, ["failure", "outcome"], count_tokens, CAP, expert_plan=["go north"])
    assert [c.id for c in cards] == ["c3-t1-failure", "c3-t1-outcome"]
    all_cards = build_cards(mixed, list(ALL), count_tokens, CAP, expert_plan=["go north"])
    assert [c.type for c in all_cards] == list(ALL)
    assert [c.privileged for c in all_cards] == [False, False, False, False, True]


def test_unknown_type_lists_the_known_ones(mixed, count_tokens):
    with pytest.raises(ValueError, match="'rubric'.*known: outcome, contrast, failure, utility, expert"):
        build_cards(mixed, ["outcome", "rubric"], count_tokens, CAP)
    with pytest.raises(ValueError, match="listed twice: outcome"):
        build_cards(mixed, ["outcome", "outcome"], count_tokens, CAP)


def test_deterministic(mixed, count_tokens):
    first = build_cards(mixed, list(ALL), count_tokens, CAP, expert_plan=["go north", "open door"])
    second = build_cards(mixed, list(ALL), count_tokens, CAP, expert_plan=["go north", "open door"])
    assert first == second
    assert [c.model_dump() for c in first] == [c.model_dump() for c in second]


def test_cards_round_trip_through_json_as_typed_facts(mixed, count_tokens):
    # The event log holds model_dump(mode="json"); reading a line back gives the same typed card.
    cards = build_cards(mixed, list(ALL), count_tokens, CAP, expert_plan=["go north", "open door"])
    for card in cards:
        assert card.data.type == card.type
        assert EvidenceCard.model_validate_json(card.model_dump_json()) == card


def test_card_facts_must_match_the_card_type(mixed, count_tokens):
    card = build_cards(mixed, ["utility"], count_tokens, CAP)[0]
    with pytest.raises(ValidationError, match="type 'outcome' but data of type 'utility'"):
        EvidenceCard(**{**dict(card), "type": "outcome"})
    assert {card_type: type(card_facts(card_type)).__name__ for card_type in ALL} == {
        "outcome": "OutcomeData",
        "contrast": "ContrastData",
        "failure": "FailureData",
        "utility": "UtilityData",
        "expert": "ExpertData",
    }


def test_failure_counts_name_every_mode():
    # A mode left out was seen in no rollout: readers index any mode without a default.
    data = FailureData(counts={"loop": 2}, examples=(), failed_rollouts=1)
    assert list(data.counts) == list(FAILURE_MODES)
    assert (data.counts["loop"], data.counts["env_error"]) == (2, 0)


def long_group(best_id: str = "best") -> tuple[RolloutGroup, list[str]]:
    words = "the rusty lantern flickers beside an ancient oak chest covered in strange glyphs".split()
    obs = " ".join(words[i % len(words)] for i in range(2000))
    actions = [
        f"carefully examine the {' '.join(words[(i + j) % len(words)] for j in range(40))} {i}"
        for i in range(40)
    ]
    bad = tuple(
        turn(a, observation=obs, valid=i % 3 != 0, invalid_reason=obs[:500]) for i, a in enumerate(actions)
    )
    return group(
        rollout(best_id, actions[:30], 1.0, True),
        rollout("worst", bad, 0.0, error=obs, truncated=True),
        rollout("probe", list(reversed(actions)) + [turn("", output=obs)], 0.0, scaffolded=False),
    ), actions


@pytest.mark.parametrize("best_id", ["best", "best-" + "x" * 300])
@pytest.mark.parametrize("cap", [16, 48, 128, 256])
def test_size_bound_on_long_group(count_tokens, cap, best_id):
    g, actions = long_group(best_id)
    cards = build_cards(g, list(ALL), count_tokens, cap, expert_plan=actions)
    assert [c.type for c in cards] == list(ALL)
    for card in cards:
        assert card.tokens == count_tokens(card.text)
        assert 0 < card.tokens <= cap, card.type
    # The data is never shrunk with the text.
    assert by_type(cards)["contrast"].data.best.actions == tuple(actions[:30])


def test_shrinking_keeps_the_header_and_the_numbers_at_a_moderate_cap(count_tokens):
    g, actions = long_group()
    card = by_type(build_cards(g, ["contrast"], count_tokens, 128))["contrast"]
    full = by_type(build_cards(g, ["contrast"], count_tokens, 100_000))["contrast"]
    assert card.tokens < full.tokens
    assert card.text.startswith("[c3-t1-contrast] task t1 (twc)")
    assert "first divergence at turn 0" in card.text


# failure detection


def modes(r: Rollout, **kw) -> list[str]:
    return [e.mode for e in detect_failures(r, **kw)]


def test_clean_rollout_has_no_failures():
    assert detect_failures(rollout("r", ["go north", "take key", "go south", "open door"], 1.0, True)) == []


def test_invalid_action():
    events = detect_failures(
        rollout("r", ["look", turn("eat door", valid=False, invalid_reason="not edible")])
    )
    assert [(e.mode, e.rollout_id, e.turn, e.excerpt) for e in events] == [
        ("invalid_action", "r", 1, "eat door -> not edible")
    ]


def test_malformed_is_not_also_invalid():
    events = detect_failures(rollout("r", ["look", turn("", output="I think I should", valid=False)]))
    assert [(e.mode, e.turn, e.excerpt) for e in events] == [("malformed_output", 1, "I think I should")]


def test_repeated_action_once_per_run():
    events = detect_failures(rollout("r", ["look", "go north", "Go  North", "go north", "wait"]))
    assert [(e.mode, e.turn, e.excerpt) for e in events] == [("repeated_action", 2, "go north")]
    # Four of the same is a repeat, not a loop; empty actions are malformed, not repeated.
    assert modes(rollout("r", ["a", "a", "a", "a"])) == ["repeated_action"]
    assert modes(rollout("r", ["", ""])) == ["malformed_output", "malformed_output"]


@pytest.mark.parametrize(
    ("actions", "turn_index", "excerpt"),
    [
        (["look", "a", "b", "a", "b"], 1, "a | b"),
        (["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b"], 0, "a | b | c"),
    ],
)
def test_loop(actions, turn_index, excerpt):
    events = detect_failures(rollout("r", actions))
    assert [(e.mode, e.turn, e.excerpt) for e in events] == [("loop", turn_index, excerpt)]


def test_no_loop_on_a_cycle_played_once():
    assert modes(rollout("r", ["a", "b", "c", "a", "b"])) == []


def test_out_of_turns():
    assert modes(rollout("r", ["a", "b"], truncated=True)) == ["out_of_turns"]
    assert modes(rollout("r", ["a", "b"]), max_turns=2) == ["out_of_turns"]
    assert modes(rollout("r", ["a", "b"]), max_turns=3) == []
    assert modes(rollout("r", ["a", "b"], 1.0, True), max_turns=2) == []
    event = detect_failures(rollout("r", ["a", "b"], truncated=True))[0]
    assert (event.turn, event.excerpt) == (1, "stopped after 2 turns, last action: b")


def test_env_error():
    events = detect_failures(rollout("r", ["a"], error="  connection reset  "))
    assert [(e.mode, e.turn, e.excerpt) for e in events] == [("env_error", 0, "connection reset")]
    assert modes(rollout("r", ["a"], error="   ")) == []


def test_excerpts_are_short():
    long = "word " * 500
    events = detect_failures(rollout("r", [turn("x", valid=False, invalid_reason=long)], error=long))
    assert {e.mode for e in events} == {"invalid_action", "env_error"}
    assert all(len(e.excerpt) <= 120 for e in events)
