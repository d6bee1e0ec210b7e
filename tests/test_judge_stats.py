"""The statistics judge: mode boundaries, EMA arithmetic, pressure, utility, state round-trip."""

from __future__ import annotations

import json

import pytest

from pats.judges import StatsJudge, pick_mode, update_ema
from pats.protocols import Judge
from pats.spec.models import LLMJudgeSpec, ScaffoldBudget, StatsJudgeSpec
from pats.testing import card_facts
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
    return EvidenceCard(
        id=f"c1-{task_id}-utility",
        type="utility",
        step=1,
        task_id=task_id,
        task_type=task_type,
        scaffold_version="v1",
        text="",
        tokens=0,
        data=card_facts("utility", delta=delta),
    )


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
    assert state == {"ema": {"coin": 1.0, "twc": 0.5}}

    k = judge()
    k.load_state_dict(state)
    out = await k.assess(2, [group("t1", "twc", [True])], [], [])
    assert out[0].ema_success == pytest.approx(0.55)  # continued, not re-initialized
    with pytest.raises(ValueError, match="as state_dict\\(\\) returns"):
        k.load_state_dict({"twc": 0.5})
