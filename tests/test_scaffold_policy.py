"""`ScaffoldPolicy` in each composition (pats.review): mode none (no store), static (a store, no
reviewer), and the commit of a set the store refuses; the records' defaults and immutability; and the
`Reviewer`'s merge of its task types' reviews, with a scripted judge and revisers."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pats.errors import JudgeError
from pats.review import Committed, Reviewer, ScaffoldPolicy, TypeRevision
from pats.scaffold import ScaffoldStore
from pats.spec.models import ScaffoldSpec
from pats.types import (
    EMPTY_VIEW,
    AddEdit,
    Assessment,
    Attempt,
    JudgeState,
    LLMUsage,
    Refinement,
    ReviewMode,
    ReviewResult,
    Rollout,
    RolloutGroup,
    Task,
    UpdateEdit,
)

TASKS = [Task(id=f"fake:twc:train:{i}", type="twc", split="train", env="fake") for i in range(2)]
BANK = [
    AddEdit(kind="skill", scope="general", text="Read the goal before you act."),
    AddEdit(kind="skill", scope="type:twc", text="Open every closed container."),
]
TYPE_PLANS = (
    AddEdit(kind="plan", scope="type:twc", text="Take the apple, then open the fridge.", cites=("a", "b")),
    AddEdit(kind="plan", scope="general", text="Look around, then act.", cites=("a", "b")),
)


@pytest.fixture
def store(count_tokens):
    store = ScaffoldStore(count_tokens, 256)
    store.seed(BANK)
    return store


def test_mode_none_shows_the_empty_view_reviews_nothing_and_probes_nothing():
    policy = ScaffoldPolicy("none")
    assert policy.view(TASKS[0]) is EMPTY_VIEW
    plans = policy.plan(TASKS, group_size=4, probes=2)
    assert [(p.task, p.view, p.size, p.probes) for p in plans] == [(t, EMPTY_VIEW, 4, 0) for t in TASKS]
    result = asyncio.run(policy.review(3, []))
    assert result == ReviewResult(step=3, cards=(), assessments=(), edits=())
    committed = policy.commit(result.model_copy(update={"edits": tuple(BANK)}), 3)
    assert committed.version is None and committed.result.edits == tuple(BANK)
    assert committed.metrics["scaffold/entries"] == 0.0 and committed.metrics["review/store_refused"] == 0.0


def test_mode_static_shows_the_bank_and_never_edits_it(store):
    policy = ScaffoldPolicy("static", store)
    view = policy.view(TASKS[0])
    assert view is store.pin(TASKS[0]) and view is not EMPTY_VIEW
    assert sorted(view.entry_ids) == ["e1", "e2"]
    assert all(e.text in view.text for e in BANK)
    plans = policy.plan(TASKS, group_size=4, probes=2)
    assert [(p.task, p.view, p.size, p.probes) for p in plans] == [(t, store.pin(t), 4, 2) for t in TASKS]
    add = AddEdit(kind="skill", scope="general", text="Close doors you opened.")
    result = ReviewResult(step=0, cards=(), assessments=(), edits=(add,))
    assert policy.apply(result, 0) is None and store.current.number == 1, "static never edits its bank"
    assert policy.commit(result, 0).metrics["scaffold/version"] == 1.0
    assert policy.judge_state().root == {}


def test_a_set_the_store_refuses_is_dropped_with_every_problem_in_one_note(store):
    policy = ScaffoldPolicy("pats", store, reviewer=object())  # type: ignore[arg-type]  # apply reads only `is None`
    result = ReviewResult(step=1, cards=(), assessments=(), edits=TYPE_PLANS, refused=("earlier",))
    committed = policy.commit(result, 1)
    assert committed.version is None and committed.result.edits == () and store.current.number == 1
    assert committed.result.refused == (
        "earlier",
        "the store refused the step's edit set, the scaffold stays as it was: "
        "edit 0 (ADD plan type:twc): a plan belongs to one task; scope it 'task:<task id>', or make it kind "
        "'skill' to guide every task in scope 'type:twc'; "
        "edit 1 (ADD plan general): a plan belongs to one task; scope it 'task:<task id>', or make it kind "
        "'skill' to guide every task in scope 'general'",
    )
    assert committed.metrics["review/store_refused"] == 1.0 and committed.metrics["scaffold/version"] == 1.0


def test_the_records_default_to_nothing_and_are_frozen():
    assert TypeRevision() == TypeRevision(edits=(), refused=(), fallback=False, over_budget=0)
    assert (TypeRevision().edits, TypeRevision().refused) == ((), ())
    assert TypeRevision().fallback is False and TypeRevision().over_budget == 0
    committed = Committed(ReviewResult(step=0, cards=(), assessments=(), edits=()), None, {})
    for record, field in ((TypeRevision(), "fallback"), (committed, "version")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, None)


# ---- the Reviewer: each type's review, merged into the step's result ----------------------------------


def rollout_group(task_id: str, task_type: str, step: int = 1) -> RolloutGroup:
    task = Task(id=task_id, type=task_type, split="train", env="fake")
    rollouts = tuple(
        Rollout(id=f"{task_id}-{i}", task_id=task_id, scaffolded=True, scaffold_version="v1", turns=(),
                reward=float(i % 2), success=bool(i % 2))
        for i in range(2)
    )  # fmt: skip
    return RolloutGroup(step=step, task=task, scaffold_version="v1", rollouts=rollouts)


GROUPS = [rollout_group("ta", "a"), rollout_group("tb", "b")]
ENTRIES = [
    AddEdit(kind="skill", scope="general", text="Read the goal before you act."),
    AddEdit(kind="skill", scope="type:b", text="Open the doors you pass."),
]


class Judge:
    """Assesses every type in REVISE and counts one grade cut off by the budget per review."""

    def __init__(self, types=("a", "b")):
        self.types, self.cut, self.loaded = types, 0, None

    async def assess(self, step, groups, cards, entries):
        self.cut += 1
        return [
            Assessment(task_type=t, mode=ReviewMode.REVISE, ema_success=0.5, pressure=0.0) for t in self.types
        ]

    def usage(self) -> LLMUsage:
        return LLMUsage(over_budget=self.cut)

    def state_dict(self):
        return {"ema": {"a": 0.5}}

    def load_state_dict(self, state):
        self.loaded = state


class Reviser:
    """Answers each type from a script: a list of edits, an exception to raise, or seconds to hang."""

    def __init__(self, by_type):
        self.by_type, self.asked, self.feedback = by_type, [], []

    async def revise(self, step, assessment, cards, entries, feedback=()):
        self.asked.append(assessment.task_type)
        self.feedback.append(list(feedback))
        answer = self.by_type[assessment.task_type]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, float):
            await asyncio.sleep(answer)
        return list(answer) if isinstance(answer, list) else []

    def usage(self) -> LLMUsage:
        return LLMUsage()


def reviewer(
    count_tokens, reviser, fallback=None, *, budget_s=300.0, cards=("outcome",), expert_plan=None, mode="pats"
):
    store = ScaffoldStore(count_tokens, 256)
    store.seed(ENTRIES)  # e1 general, e2 type:b
    spec = ScaffoldSpec(mode=mode, min_citations=0, review_budget_s=budget_s, cards=cards)
    fallback = fallback or Reviser({"a": [], "b": []})
    return Reviewer(store, spec, Judge(), reviser, fallback, count_tokens, expert_plan=expert_plan)


def test_the_types_sets_merge_and_a_shared_entry_is_edited_once_first_type_first(count_tokens):
    first = UpdateEdit(entry_id="e1", text="Read the whole goal first.")
    skill = AddEdit(kind="skill", scope="type:b", text="Look under the tables.")
    again = UpdateEdit(entry_id="e1", text="Read the goal, then make a plan.")
    doors = UpdateEdit(entry_id="e2", text="Open every door you pass.")
    review = reviewer(count_tokens, Reviser({"a": [first], "b": [skill, again, doors]}))
    result = asyncio.run(review.review(1, GROUPS))
    assert result.edits == (first, skill, doors), "b's edit of e1 (a's already) is dropped, the rest kept"
    assert result.refused == () and result.fallback is False and result.fallback_streak == 0
    assert result.over_budget == 1, "the judge's one cut grade, no reviser call cut off"
    assert 0 <= result.seconds < 60
    assert review.reviser.feedback == [[], []], "a first attempt gets no feedback"


def test_a_review_adds_up_what_its_types_cost_and_refused(count_tokens):
    doors = UpdateEdit(entry_id="e2", text="Open every door you pass.")
    # a hangs 0.6 s: past the 0.2 s budget, so its call is cut off there, not at a second or never.
    review = reviewer(count_tokens, Reviser({"a": 0.6, "b": [doors]}), budget_s=0.2)
    result = asyncio.run(review.review(1, GROUPS))
    assert result.edits == (doors,)
    assert result.refused == (
        "a: reviser stopped at the step's review budget (scaffold.review_budget_s=0.2)",
    )
    assert result.fallback is True, "the rules answered for a (b's own set stood)"
    assert result.over_budget == 2, "a's reviser call and the judge's grade, both cut off"
    assert result.fallback_streak == 0, "not every type fell back"


def test_a_reviser_replaced_for_every_type_three_steps_in_a_row_is_announced_once(count_tokens, capsys):
    failing = Reviser({"a": JudgeError("no answer"), "b": JudgeError("no answer")})
    review = reviewer(count_tokens, failing)
    streaks = [asyncio.run(review.review(s, GROUPS)).fallback_streak for s in range(4)]
    assert streaks == [1, 2, 3, 4]
    assert failing.asked == ["a", "b"] * 4, "a failed call is not asked again"
    err = capsys.readouterr().err
    assert err.count("steps in a row") == 1
    assert err == (
        "warning: step 2: the LLM reviser has failed 3 steps in a row; the rules reviser answered every task "
        "type in its place. First problem of step 2: a: reviser failed: no answer. Training goes on; check "
        "reviser.llm (model, api_base, api_key_env) and the metrics review/llm_faults, "
        "review/fallback_streak.\n"
    )
    review.reviser = Reviser({"a": [], "b": []})
    assert asyncio.run(review.review(4, GROUPS)).fallback_streak == 0, "an answer ends the streak"


def test_expert_cards_need_the_card_type_and_a_plan(count_tokens):
    plans = []

    def plan(task):
        plans.append(task.id)
        return ["go to kitchen", "take key"]

    def card_types(**kwargs):
        result = asyncio.run(reviewer(count_tokens, Reviser({"a": [], "b": []}), **kwargs).review(1, GROUPS))
        return sorted({c.type for c in result.cards})

    assert card_types(cards=("outcome", "expert"), expert_plan=plan) == ["expert", "outcome"]
    result = asyncio.run(reviewer(count_tokens, Reviser({"a": [], "b": []})).review(1, GROUPS))
    assert sorted({c.task_id for c in result.cards}) == ["ta", "tb"], "every group's cards"
    assert plans == ["ta", "tb"]
    assert card_types(cards=("outcome", "expert")) == ["outcome"]
    assert card_types(cards=("outcome",), expert_plan=plan) == ["outcome"] and plans == ["ta", "tb"]


def test_the_judges_state_goes_through_the_policy(count_tokens):
    review = reviewer(count_tokens, Reviser({}))
    policy = ScaffoldPolicy("pats", review.store, review)
    assert policy.judge_state() == JudgeState({"ema": {"a": 0.5}})
    state = JudgeState({"ema": {"b": 0.25}})
    policy.load_judge_state(state)
    assert review.judge.loaded == {"ema": {"b": 0.25}}
    assert review.judge.loaded["ema"] is not state.root["ema"], "a deep copy: the judge may change it"
    ScaffoldPolicy("none").load_judge_state(state)  # no judge: nothing to load, no error


BAD = [UpdateEdit(entry_id="e9", text="Anything."), UpdateEdit(entry_id="e8", text="Anything else.")]
BAD_ERRORS = [
    "edit 0 (UPDATE e9): no entry 'e9' exists; UPDATE only ids of this type's entries (e1, e2)",
    "edit 1 (UPDATE e8): no entry 'e8' exists; UPDATE only ids of this type's entries (e1, e2)",
]
BAD_NOTE = "; ".join(BAD_ERRORS)


def test_an_invalid_set_is_retried_once_with_its_errors_then_the_fallback_answers(count_tokens):
    llm, rules = Reviser({"b": BAD}), Reviser({"b": BAD})
    review = reviewer(count_tokens, llm, rules)
    review.judge.types = ("b",)
    result = asyncio.run(review.review(1, GROUPS))
    assert llm.asked == ["b", "b"] and llm.feedback == [[], BAD_ERRORS]
    assert rules.asked == ["b"]
    assert result.refused == (
        f"b attempt 1: {BAD_NOTE}",
        f"b attempt 2: {BAD_NOTE}",
        f"b fallback: {BAD_NOTE}",
    )
    assert result.edits == () and result.fallback is True, "the fallback answered, and its set was refused"


def test_when_the_rules_are_the_reviser_their_refused_set_is_no_fallback(count_tokens):
    rules = Reviser({"b": BAD})
    review = reviewer(count_tokens, rules, rules)
    review.judge.types = ("b",)
    result = asyncio.run(review.review(1, GROUPS))
    assert rules.asked == ["b", "b"] and result.refused == (
        f"b attempt 1: {BAD_NOTE}",
        f"b attempt 2: {BAD_NOTE}",
    )
    assert result.fallback is False and result.fallback_streak == 0


def test_mode_grow_refuses_anything_but_adds(count_tokens):
    doors = UpdateEdit(entry_id="e2", text="Open every door you pass.")
    review = reviewer(count_tokens, Reviser({"b": [doors]}), mode="grow")
    review.judge.types = ("b",)
    result = asyncio.run(review.review(1, GROUPS))
    assert (
        result.edits == ()
        and "b attempt 1: edit 0 (UPDATE e2): mode grow only adds entries" in result.refused[0]
    )


def test_the_streak_warning_quotes_at_most_300_characters_of_the_first_problem(count_tokens, capsys):
    long = "x" * 400
    review = reviewer(count_tokens, Reviser({"a": JudgeError(long), "b": JudgeError(long)}))
    for step in range(3):
        asyncio.run(review.review(step, GROUPS))
    quoted = f"a: reviser failed: {long}"[:300]
    assert f"First problem of step 2: {quoted}. Training goes on" in capsys.readouterr().err


class Refining(Reviser):
    """A reviser that checks and re-asks itself (as the LLM reviser's program does): the review asks it
    once per type through `refine`, never through `revise`."""

    check = staticmethod(lambda edits, assessment, entries, cards: [])

    def __init__(self, by_type):
        super().__init__(by_type)
        self.refined: list[str] = []

    async def revise(self, step, assessment, cards, entries, feedback=()):
        raise AssertionError("a refining reviser is asked through refine")

    async def refine(self, step, assessment, cards, entries):
        self.refined.append(assessment.task_type)
        return Refinement(attempts=tuple(self.by_type[assessment.task_type]))


def test_a_refining_reviser_is_asked_once_and_its_refused_answers_are_logged_per_attempt(count_tokens):
    doors = UpdateEdit(entry_id="e2", text="Open every door you pass.")
    second = Attempt(edits=(doors,))
    reviser = Refining(
        {
            "a": [Attempt(problems=("edit 0: too long", "edit 1: no cites")), Attempt()],
            "b": [Attempt(), second],
        }
    )
    result = asyncio.run(reviewer(count_tokens, reviser).review(1, GROUPS))
    assert reviser.refined == ["a", "b"], "one program run per type"
    assert result.edits == (doors,)
    assert result.refused == ("a attempt 1: edit 0: too long; edit 1: no cites",)
    assert result.fallback is False, "the program's own second answer stood"
    assert result.over_budget == 1, "the judge's one cut grade; nothing of the reviser's"


def test_a_refinement_refused_to_the_end_falls_back_to_the_rules_without_a_budget_cut(count_tokens):
    tables = AddEdit(kind="skill", scope="type:a", text="Look under the tables.")
    refused = [Attempt(problems=("p1",)), Attempt(problems=("p2", "p3"))]
    result = asyncio.run(
        reviewer(
            count_tokens, Refining({"a": refused, "b": [Attempt()]}), Reviser({"a": [tables], "b": []})
        ).review(1, GROUPS)
    )
    assert result.refused == ("a attempt 1: p1", "a attempt 2: p2; p3")
    assert result.edits == (tables,) and result.fallback is True
    assert result.over_budget == 1, "a refused answer is not a call the budget cut off"


def test_a_failed_reviser_call_is_not_counted_as_cut_off_by_the_budget(count_tokens):
    result = asyncio.run(
        reviewer(count_tokens, Reviser({"a": JudgeError("no answer"), "b": []})).review(1, GROUPS)
    )
    assert result.refused == ("a: reviser failed: no answer",)
    assert result.over_budget == 1, "the judge's cut grade only"


def test_the_streak_warning_without_a_refused_answer_names_no_problem(capsys):
    from pats.review import _announce_streak

    _announce_streak(7, [])
    assert capsys.readouterr().err == (
        "warning: step 7: the LLM reviser has failed 3 steps in a row; the rules reviser answered every task "
        "type in its place. Training goes on; check reviser.llm (model, api_base, api_key_env) and the "
        "metrics review/llm_faults, review/fallback_streak.\n"
    )
