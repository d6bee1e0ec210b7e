"""The LLM judge: verdicts parsed with citations, anything doubtful unscored, faults never raise."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM

from pats.errors import PrerequisiteError, SpecError
from pats.judges.llm import GRADE_LABELS, LLMJudge, load_rubric
from pats.protocols import Judge
from pats.spec.models import LLMJudgeSpec, LLMSpec, ScaffoldBudget
from pats.testing import ScriptedOpenAIServer, evidence_card
from pats.types import EvidenceCard, ReviewMode, Rollout, RolloutGroup, ScaffoldEntry, Task


def group(task_id: str, task_type: str, successes: list[bool]) -> RolloutGroup:
    task = Task(id=task_id, type=task_type, split="train", env="twx")
    rollouts = tuple(
        Rollout(
            id=f"{task_id}-{i}",
            task_id=task_id,
            scaffolded=True,
            scaffold_version="v1",
            turns=(),
            reward=float(s),
            success=s,
        )
        for i, s in enumerate(successes)
    )
    return RolloutGroup(step=3, task=task, scaffold_version="v1", rollouts=rollouts)


def card(task_id: str, task_type: str, kind: str, text: str) -> EvidenceCard:
    return evidence_card(task_id, kind, task_type, step=3, text=text)


def entry(id: str, scope: str, text: str, kind: str = "skill") -> ScaffoldEntry:
    return ScaffoldEntry(id=id, kind=kind, scope=scope, text=text, tokens=5, created_step=1, updated_step=1)


GROUPS = [group("twc-1", "twc", [True, False, False, False]), group("coin-1", "coin", [True] * 4)]
CARDS = [
    card("twc-1", "twc", "outcome", "success 0.25 over 4 rollouts"),
    card("twc-1", "twc", "failure", "repeated 'look around' 9 times; 3 rollouts out of turns"),
    card("coin-1", "coin", "outcome", "success 1.0 over 4 rollouts"),
]
ENTRIES = [
    entry("g1", "general", "Read the valid actions before acting."),
    entry("s1", "type:twc", "Put dirty clothes in the washing machine."),
    entry("m1", "type:twc", "Do not repeat 'look around'.", kind="mistake"),
    entry("p1", "task:twc-1", "take shirt, move north, put shirt in washer", kind="plan"),
    entry("s9", "type:coin", "Open doors before moving."),
]
TWC_IDS = ["g1", "s1", "m1", "p1"]


def make_judge(lm=None, **llm) -> LLMJudge:
    spec = LLMJudgeSpec(llm=LLMSpec(**{"model": "openai/judge", "max_retries": 1, "backoff_s": 0.0, **llm}))
    return LLMJudge(spec, ScaffoldBudget(), "twx", lm=lm)


def grade(entry_id: str, label: str, cites=("c3-twc-1-outcome",), reason: str = "because") -> dict:
    return {"entry_id": entry_id, "label": label, "reason": reason, "cites": list(cites)}


async def assess_twc(judge: LLMJudge):
    twc_groups = [g for g in GROUPS if g.task.type == "twc"]
    twc_cards = [c for c in CARDS if c.task_type == "twc"]
    (assessment,) = await judge.assess(3, twc_groups, twc_cards, ENTRIES)
    return assessment


async def test_verdicts_with_citations():
    answer = [
        grade("g1", "helpful", ["c3-twc-1-outcome", "c3-twc-1-failure"], "success rises"),
        grade("s1", "stale"),
        grade("m1", "Helpful ", ["c3-twc-1-failure"]),  # case and spaces are forgiven, not the word
        grade("p1", "redundant", ["c3-twc-1-outcome", "c3-twc-1-outcome"]),
        grade("s9", "harmful"),  # not this type's entry: ignored
    ]
    lm = DummyLM([{"verdicts": answer}])
    judge = make_judge(lm)
    assessment = await assess_twc(judge)

    assert assessment.task_type == "twc" and assessment.mode is ReviewMode.EXPAND  # from StatsJudge
    by_id = {v.entry_id: v for v in assessment.verdicts}
    assert [v.entry_id for v in assessment.verdicts] == TWC_IDS
    assert by_id["g1"].label == "helpful" and by_id["g1"].reason == "success rises"
    assert by_id["g1"].cites == ("c3-twc-1-outcome", "c3-twc-1-failure")
    assert by_id["s1"].label == "stale" and by_id["m1"].label == "helpful"
    assert by_id["p1"].cites == ("c3-twc-1-outcome",)  # repeated citation kept once
    assert judge.faults == {}

    prompt = "\n".join(m["content"] for m in lm.history[-1]["messages"])
    assert "repeated 'look around' 9 times" in prompt and "[c3-twc-1-failure]" in prompt
    assert "[p1] plan, scope task:twc-1" in prompt
    assert "Open doors before moving" not in prompt  # coin's entry is not shown to twc's grading
    assert "TextWorldExpress" in prompt and "stale:" in prompt  # the rubric is the instructions
    assert dspy.settings.lm is None


@pytest.mark.parametrize(
    "bad, why",
    [
        (grade("s1", "useful"), "not one of"),
        (grade("s1", "helpful", ["c3-coin-1-outcome"]), "unknown card"),  # another type's card
        (grade("s1", "helpful", ["c99-nowhere"]), "unknown card"),
        (grade("s1", "helpful", []), "cites no card"),
        ({**grade("s1", "helpful"), "cites": "c3-twc-1-outcome"}, "not a list"),
        ({"entry_id": "s1", "reason": "no label"}, "not one of"),
    ],
)
async def test_doubtful_grade_is_unscored(bad, why):
    answer = [grade("g1", "helpful"), bad, grade("m1", "harmful"), grade("p1", "helpful")]
    assessment = await assess_twc(make_judge(DummyLM([{"verdicts": answer}])))
    labels = {v.entry_id: v.label for v in assessment.verdicts}
    assert labels == {"g1": "helpful", "s1": "unscored", "m1": "harmful", "p1": "helpful"}
    (s1,) = [v for v in assessment.verdicts if v.entry_id == "s1"]
    assert why in s1.reason and s1.cites == ()


async def test_missing_and_conflicting_grades_are_unscored():
    answer = [grade("g1", "helpful"), grade("g1", "harmful"), grade("m1", "stale"), grade("m1", "stale")]
    assessment = await assess_twc(make_judge(DummyLM([{"verdicts": answer}])))
    by_id = {v.entry_id: v for v in assessment.verdicts}
    assert by_id["g1"].label == "unscored" and "graded twice" in by_id["g1"].reason
    assert by_id["m1"].label == "stale"  # the same grade twice is one grade
    assert by_id["s1"].label == "unscored" and "no grade" in by_id["s1"].reason


async def test_unparseable_answer_is_unscored_after_retries():
    lm = DummyLM([{"verdicts": "I think they are all fine."}, {"verdicts": "{still not a list"}])
    judge = make_judge(lm)  # max_retries=1: two attempts
    assessment = await assess_twc(judge)
    assert [v.label for v in assessment.verdicts] == ["unscored"] * 4
    assert "malformed" in assessment.verdicts[0].reason
    assert judge.faults == {"malformed": 2}
    assert assessment.mode is ReviewMode.EXPAND  # the mode still comes through


async def test_types_graded_separately_and_no_call_without_entries():
    answers = {
        "[[ ## task_type ## ]]\ntwc": {"verdicts": [grade(i, "helpful") for i in TWC_IDS]},
        "[[ ## task_type ## ]]\ncoin": {
            "verdicts": [
                grade("g1", "redundant", ["c3-coin-1-outcome"]),
                grade("s9", "harmful", ["c3-coin-1-outcome"]),
            ]
        },
    }
    lm = DummyLM(answers)
    judge = make_judge(lm)
    assessments = await judge.assess(3, GROUPS, CARDS, ENTRIES)
    by_type = {a.task_type: {v.entry_id: v.label for v in a.verdicts} for a in assessments}
    assert by_type["twc"] == dict.fromkeys(TWC_IDS, "helpful")
    assert by_type["coin"] == {"g1": "redundant", "s9": "harmful"}
    assert len(lm.history) == 2

    # With no entries there is nothing to grade and nothing to ask.
    assessments = await judge.assess(4, GROUPS, CARDS, [])
    assert all(a.verdicts == () for a in assessments) and len(lm.history) == 2


async def test_state_is_the_stats_judges():
    judge = make_judge(DummyLM([{"verdicts": []}]))
    assert isinstance(judge, Judge)
    await assess_twc(judge)
    state = judge.state_dict()
    assert state["ema"] == {"twc": 0.25} and state["reviews"] == {"twc": 1}
    other = make_judge(DummyLM([]))
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.state_dict() == state


async def test_through_http_server(monkeypatch):
    monkeypatch.setenv("PATS_TEST_JUDGE_KEY", "sk-test-SECRET123")
    answer = [grade(i, "helpful", ["c3-twc-1-failure"]) for i in TWC_IDS]
    wire = f"[[ ## verdicts ## ]]\n{json.dumps(answer)}\n\n[[ ## completed ## ]]"
    with ScriptedOpenAIServer([{"status": 503}, wire]) as server:
        judge = make_judge(api_base=server.base_url, api_key_env="PATS_TEST_JUDGE_KEY", timeout_s=2.0)
        assessment = await assess_twc(judge)
    assert [v.label for v in assessment.verdicts] == ["helpful"] * 4
    assert judge.faults == {"server_error": 1}
    assert "Do not repeat 'look around'." in server.prompts()[-1]


async def test_llm_fault_leaves_type_unscored(monkeypatch):
    monkeypatch.setenv("PATS_TEST_JUDGE_KEY", "sk-test-SECRET123")
    with ScriptedOpenAIServer([{"status": 500}] * 2) as server:
        judge = make_judge(api_base=server.base_url, api_key_env="PATS_TEST_JUDGE_KEY", timeout_s=2.0)
        assessment = await assess_twc(judge)
    assert [v.label for v in assessment.verdicts] == ["unscored"] * 4
    assert "server_error" in assessment.verdicts[0].reason
    assert judge.faults == {"server_error": 2}


@pytest.mark.parametrize("environment", ["twx", "alfworld", "webshop", "search_qa"])
def test_shipped_rubrics_load(environment):
    rubric = load_rubric(None, environment)
    assert rubric.environment == environment
    assert set(rubric.labels) == set(GRADE_LABELS) and rubric.examples
    text = rubric.render()
    assert all(f"- {label}:" in text for label in GRADE_LABELS)


def test_an_environment_without_a_rubric_of_pats_is_told_to_bring_its_own():
    with pytest.raises(PrerequisiteError, match=r"judges/myenv\.yaml .* set the spec's judge\.rubric"):
        load_rubric(None, "myenv")


def test_bad_rubric_reports_every_problem(write):
    path = write("rubric.yaml", "environment: twx\nlabels: {helpful: yes}\nextra_key: 1\n")
    with pytest.raises(SpecError) as info:
        load_rubric(str(path), "twx")
    message = str(info.value)
    assert "instructions" in message and "extra_key" in message
