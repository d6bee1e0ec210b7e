"""`ScaffoldPolicy` in each composition (pats.review): mode none (no store), static (a store, no
reviewer), and the commit of a set the store refuses; the records' defaults and immutability."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pats.review import Committed, ScaffoldPolicy, TypeRevision
from pats.scaffold import ScaffoldStore
from pats.types import EMPTY_VIEW, AddEdit, ReviewResult, Task

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
