"""The statistics judge: mode boundaries, EMA arithmetic, pressure, utility, state round-trip."""

from __future__ import annotations

import json

import pytest

from pats.judges import StatsJudge, pick_mode, update_ema
from pats.protocols import Judge
from pats.spec.models import LLMJudgeSpec, ScaffoldBudget, StatsJudgeSpec
from pats.testing import evidence_card
from pats.types import EvidenceCard, ReviewMode, Rollout, RolloutGroup, ScaffoldEntry, Task

E, R, C, P = ReviewMode.EXPAND, ReviewMode.REVISE, ReviewMode.COMPRESS, ReviewMode.PRUNE


def group(task_id: str, task_type: str, successes: list[bool], probes: list[bool] = (), step: int = 1):
    task = Task(id=task_id, type=task_type, split="train", env="twx")
    rollouts = [(True, s) for s in successes] + [(False, s) for s in probes]
    return RolloutGroup(
        step=step,
        task=task,
        scaffold_version="v1",
        rollouts=tuple(
            Rollout(
                id=f"{task_id}-{i}",
                task_id=task_id,
                scaffolded=scaffolded,
                scaffold_version="v1" if scaffolded else "",
                turns=(),
                reward=float(s),
                success=s,
            )
            for i, (scaffolded, s) in enumerate(rollouts)
        ),
    )


def entry(id: str, scope: str, tokens: int) -> ScaffoldEntry:
    return ScaffoldEntry(
        id=id, kind="skill", scope=scope, text=id, tokens=tokens, created_step=0, updated_step=0
    )


def utility(task_id: str, task_type: str, delta: float) -> EvidenceCard:
    return evidence_card(task_id, "utility", task_type, delta=delta)


def judge(**budget) -> StatsJudge:
    return StatsJudge(StatsJudgeSpec(), ScaffoldBudget(**budget))


@pytest.mark.parametrize(
    "ema, pressure, mode",
    [
        (0.3, 0.0, R),
        (0.2999, 0.0, E),
        (0.0, 0.0, E),
        (0.7, 0.0, C),
        (0.6999, 0.0, R),
        (1.0, 0.9999, C),
        (0.9, 1.0, P),
        (0.0, 1.5, P),
    ],
)
def test_mode_at_each_threshold(ema, pressure, mode):
    assert pick_mode(ema, pressure, compress=0.7, revise=0.3) is mode


def test_ema_arithmetic():
    assert update_ema(None, 0.5, 0.1) == 0.5
    assert update_ema(0.5, 1.0, 0.1) == pytest.approx(0.55)
    assert update_ema(0.55, 0.0, 0.1) == pytest.approx(0.495)
    assert update_ema(0.2, 0.8, 1.0) == 0.8


def test_satisfies_the_judge_protocol():
    assert isinstance(judge(), Judge)
    # The LLM judge spec carries the same thresholds, so its fallback can be a StatsJudge.
    spec = LLMJudgeSpec(llm={"model": "openai/gpt-4o-mini"}, ema_alpha=0.5)
    assert StatsJudge(spec, ScaffoldBudget()).alpha == 0.5


async def test_ema_per_type_in_group_order():
    j = judge()
    groups = [
        group("t1", "twc", [True, False, True, False]),  # 0.5 initializes twc
        group("k1", "coin", [False, False]),  # 0.0 initializes coin
        group("t2", "twc", [True] * 4),  # 0.1 * 1.0 + 0.9 * 0.5
    ]
    out = await j.assess(1, groups, [], [])
    assert [a.task_type for a in out] == ["coin", "twc"]
    assert out[0].ema_success == 0.0 and out[0].mode is E
    assert out[1].ema_success == pytest.approx(0.55) and out[1].mode is R
    # Next step: 0.1 * 1.0 + 0.9 * 0.55 = 0.595; coin is absent and gets no assessment.
    out = await j.assess(2, [group("t3", "twc", [True, True], step=2)], [], [])
    assert [(a.task_type, round(a.ema_success, 6)) for a in out] == [("twc", 0.595)]


async def test_probe_rollouts_do_not_count_as_success():
    out = await judge().assess(1, [group("t1", "twc", [True, True], probes=[False, False])], [], [])
    assert out[0].ema_success == 1.0 and out[0].mode is C


async def test_pressure_counts_entries_the_type_can_see():
    entries = [
        entry("g", "general", 10),
        entry("a", "type:twc", 30),
        entry("p1", "task:t1", 20),
        entry("p9", "task:t9", 500),  # a twc task not played this step: does not press
        entry("k", "type:coin", 400),  # another type's
    ]
    out = await judge(max_entries=4, max_tokens=100).assess(1, [group("t1", "twc", [False])], [], entries)
    assert out[0].pressure == pytest.approx(0.75)  # 3 of 4 entries; 60 of 100 tokens
    out = await judge(max_entries=10, max_tokens=40).assess(1, [group("t1", "twc", [True])], [], entries)
    assert out[0].pressure == pytest.approx(1.5)  # 60 of 40 tokens
    assert out[0].mode is P  # pressure beats an EMA of 1.0
    out = await judge(max_entries=3, max_tokens=1000).assess(1, [group("t1", "twc", [False])], [], entries)
    assert out[0].pressure == 1.0 and out[0].mode is P


async def test_utility_is_the_mean_delta_of_the_types_utility_cards():
    cards = [utility("t1", "twc", 0.5), utility("t2", "twc", -0.25), utility("k1", "coin", 1.0)]
    groups = [group("t1", "twc", [True]), group("t2", "twc", [True]), group("x1", "sort", [True])]
    out = {a.task_type: a.utility for a in await judge().assess(1, groups, cards, [])}
    assert out == {"sort": None, "twc": pytest.approx(0.125)}


async def test_state_round_trip():
    j = judge()
    await j.assess(1, [group("t1", "twc", [True, False]), group("k1", "coin", [True])], [], [])
    state = json.loads(json.dumps(j.state_dict()))
    assert state == {
        "ema": {"coin": 1.0, "twc": 0.5},
        "task_ema": {"k1": 1.0, "t1": 0.5},
        "reviews": {"coin": 1, "twc": 1},
    }

    k = judge()
    k.load_state_dict(state)
    out = await k.assess(2, [group("t1", "twc", [True])], [], [])
    assert out[0].ema_success == pytest.approx(0.55)  # continued, not re-initialized
    assert out[0].reviews == 2
    with pytest.raises(ValueError) as info:
        k.load_state_dict({"twc": 0.5})
    assert str(info.value) == (
        "StatsJudge state must look like {'ema': {<task type>: <float>}, 'task_ema': {<task id>: <float>}, "
        "'reviews': {<task type>: <int>}}, as state_dict() returns"
    )
    with pytest.raises(ValueError, match="as state_dict\\(\\) returns"):
        k.load_state_dict({"ema": {"twc": 0.5}, "reviews": {"twc": "two"}})
    old = judge()  # a checkpoint from before per-task averages: they start again
    old.load_state_dict({"ema": {"twc": 0.5}})
    assert old.state_dict() == {"ema": {"twc": 0.5}, "task_ema": {}, "reviews": {}}


def anchor(**kw) -> StatsJudge:
    """The small-scale reproduction's removal: averages from 0, warm-up 4, threshold 0.25."""
    return StatsJudge(StatsJudgeSpec(**{"ema_start": 0.0, "removal_warmup": 4, "removal_threshold": 0.25, **kw}),
                      ScaffoldBudget())  # fmt: skip


async def test_defaults_withdraw_nothing_and_keep_the_first_group_rule():
    j = judge()
    (a,) = await j.assess(1, [group("t1", "twc", [True] * 4)], [], [])
    assert a.ema_success == 1.0 and a.mode is C and a.removal_open and a.reviews == 1
    assert [(s.scope, s.success, s.withdraw) for s in a.scopes] == [
        ("type:twc", 1.0, False),
        ("task:t1", 1.0, False),
    ]
    assert a.reason == "COMPRESS: success average 1.000 >= compress_threshold 0.7"


async def test_averages_start_at_ema_start_per_type_and_per_task():
    j = anchor(removal_warmup=0)
    (a,) = await j.assess(1, [group("t1", "twc", [True] * 4), group("t2", "twc", [False] * 4)], [], [])
    # type: 0 -> 0.1 (t1) -> 0.09 (t2); t1: 0 -> 0.1; t2: 0 -> 0.0
    assert a.ema_success == pytest.approx(0.09) and a.mode is E
    assert {s.scope: round(s.success, 6) for s in a.scopes} == {
        "type:twc": 0.09,
        "task:t1": 0.1,
        "task:t2": 0.0,
    }


async def test_warmup_holds_back_removal_then_tasks_are_withdrawn_one_by_one():
    j = anchor()
    seen = []
    for step in range(1, 8):  # t1 always wins, t2 half the time, t3 never
        groups = [
            group("t1", "twc", [True] * 4),
            group("t2", "twc", [True, False] * 2),
            group("t3", "twc", [False] * 4),
        ]
        (a,) = await j.assess(step, groups, [], [])
        seen.append((a.removal_open, {s.scope for s in a.scopes if s.withdraw}))
    # Reviews 1-4 are the warm-up: no removal whatever the averages (t1's is 0.34 by review 4).
    assert all(not open_ and not gone for open_, gone in seen[:4])
    # Review 5: t1's average 1 - 0.9^5 = 0.41 and the type's (0.37, three groups a step) pass 0.25;
    # t2's 0.5 * 0.41 = 0.205 does not. Review 7: t2's 0.5 * (1 - 0.9^7) = 0.261 does. t3 never.
    assert seen[4] == seen[5] == (True, {"type:twc", "task:t1"})
    assert seen[6] == (True, {"type:twc", "task:t1", "task:t2"})


async def test_the_reason_names_the_warmup_and_what_was_withdrawn():
    j = anchor(removal_warmup=1)
    (a,) = await j.assess(1, [group("t1", "twc", [True] * 4)], [], [])
    assert (
        a.reason
        == "EXPAND: success average 0.100 < revise_threshold 0.3; warm-up, review 1 of 1: no removal but PRUNE"
    )
    for step in range(2, 5):
        (a,) = await j.assess(step, [group("t1", "twc", [True] * 4)], [], [])
    # 1 - 0.9^4 = 0.3439 for both the type and its only task
    assert a.reason == (
        "REVISE: success average 0.344 in [revise_threshold 0.3, compress_threshold 0.7); "
        "withdrawn at removal_threshold 0.25: type:twc (0.344), task:t1 (0.344)"
    )


async def test_the_event_log_and_the_llm_reviser_see_why(tmp_path):
    from pats.lm.prompts import render_assessment
    from pats.logging.events import AssessmentEvent, EventLog, read_events, write_review
    from pats.types import ReviewResult

    j = anchor(removal_warmup=1)
    (warm,) = await j.assess(1, [group("t1", "twc", [True] * 4)], [], [])
    assert render_assessment(warm).endswith("; warm-up: delete nothing unless over budget")
    for step in range(2, 5):
        (a,) = await j.assess(step, [group("t1", "twc", [True] * 4)], [], [])
    assert render_assessment(a).endswith(
        "; solved, so withdraw their entries and add none there: type:twc (0.34), task:t1 (0.34)"
    )
    log = EventLog(tmp_path / "events.jsonl")
    write_review(log, 4, [], ReviewResult(step=4, cards=(), assessments=(a,), edits=()), None)
    log.end_step(4)
    (line,) = read_events(tmp_path / "events.jsonl", AssessmentEvent)
    assert line.assessment.reason == a.reason and line.assessment.reviews == 4
    scope = line.assessment.scopes[1]
    assert (scope.scope, scope.success, scope.withdraw) == ("task:t1", pytest.approx(0.3439), True)


async def test_a_type_with_only_empty_groups_so_far_counts_as_failing():
    out = await judge().assess(1, [group("t1", "twc", [])], [], [])
    assert out[0].ema_success == 0.0 and out[0].mode is E
    assert out[0].scopes == (), "no average yet to withdraw a scope by"


async def test_a_scope_at_the_threshold_is_withdrawn_and_a_prune_says_why():
    # The first group sets the average (no ema_start): 0.25 exactly, the threshold: withdrawn ("at or above").
    j = StatsJudge(StatsJudgeSpec(removal_threshold=0.25), ScaffoldBudget(max_entries=1))
    (a,) = await j.assess(
        1, [group("t1", "twc", [True, False, False, False])], [], [entry("g", "general", 5)]
    )
    assert [(s.scope, s.success, s.withdraw) for s in a.scopes] == [
        ("type:twc", 0.25, True),
        ("task:t1", 0.25, True),
    ]
    assert a.mode is P and a.reason == (
        "PRUNE: budget pressure 1.00 >= 1; withdrawn at removal_threshold 0.25: type:twc (0.250), task:t1 (0.250)"
    )
