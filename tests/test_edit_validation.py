"""Edit-set validation: each rule broken once, with the message fragment it must produce; and the
review-level and store-level checks agree (one validator, pats.scaffold.validate)."""

from __future__ import annotations

import random

import pytest

from pats.reviser import validate_edits
from pats.scaffold import EditError, ScaffoldStore
from pats.scaffold.validate import edit_problems, similarity
from pats.testing import evidence_card
from pats.types import AddEdit, DeleteEdit, EvidenceCard, ReviewMode, ScaffoldEntry, UpdateEdit

E, R, C, P = ReviewMode.EXPAND, ReviewMode.REVISE, ReviewMode.COMPRESS, ReviewMode.PRUNE


def card(task_id: str, type_: str, task_type: str = "twc") -> EvidenceCard:
    return evidence_card(task_id, type_, task_type)


def entry(id: str, scope: str, text: str, kind: str = "skill") -> ScaffoldEntry:
    return ScaffoldEntry(id=id, kind=kind, scope=scope, text=text, tokens=0, created_step=0, updated_step=0)


CARDS = [card("t1", "outcome"), card("t1", "contrast"), card("t2", "outcome"), card("t2", "failure")]
CARDS += [card("k1", "outcome", task_type="coin")]
CITES = ("c1-t1-outcome", "c1-t1-contrast")
ENTRIES = [
    entry("e1", "general", "Read the goal before you act."),
    entry("e2", "type:twc", "Open every closed container to find the items you need."),
    entry("e3", "task:t1", "Steps that worked: take apple -> open fridge -> put apple in fridge", "plan"),
    entry("e4", "type:coin", "Pick up coins as soon as you see them."),
]


def add(text: str, kind: str = "skill", scope: str = "type:twc", cites=CITES) -> AddEdit:
    return AddEdit(kind=kind, scope=scope, text=text, cites=cites)


def update(entry_id: str, text: str, cites=CITES) -> UpdateEdit:
    return UpdateEdit(entry_id=entry_id, text=text, cites=cites)


def delete(entry_id: str, cites=CITES) -> DeleteEdit:
    return DeleteEdit(entry_id=entry_id, reason="redundant", cites=cites)


@pytest.fixture
def check(count_tokens):
    def _check(
        edits,
        mode,
        *,
        removal=True,
        min_citations=2,
        entries=ENTRIES,
        task_plans=True,
        add_only=False,
        plans_per_review=0,
    ):
        return validate_edits(
            edits,
            mode,
            entries,
            CARDS,
            count_tokens,
            task_plans=task_plans,
            removal=removal,
            min_citations=min_citations,
            task_type="twc",
            add_only=add_only,
            plans_per_review=plans_per_review,
        )

    return _check


def one(problems: list[str], fragment: str) -> None:
    assert len(problems) == 1, problems
    assert fragment in problems[0], problems[0]


SKILLS = ["Look in the kitchen first.", "Carry items one at a time.", "Close doors you opened."]
VALID = {
    E: [
        add(SKILLS[0]),
        add("Go back to the start", "plan", "task:t2"),
        add("Never drop the key.", "mistake"),
    ],
    R: [
        add(SKILLS[0]),
        add("Never drop the key.", "mistake"),
        update("e2", "Open containers."),
        delete("e3"),
    ],
    C: [delete("e3"), delete("e2"), add("Open containers; the plan for t1 is fridge.", scope="task:t1")],
    P: [delete("e2"), delete("e3")],
}


@pytest.mark.parametrize("mode", [E, R, C, P])
def test_a_valid_set_passes(check, mode):
    assert check(VALID[mode], mode) == []


@pytest.mark.parametrize("mode", [E, R, C, P])
@pytest.mark.parametrize("removal", [True, False])
def test_the_empty_set_is_valid_in_every_mode(check, mode, removal):
    assert check([], mode, removal=removal) == []


def test_grow_accepts_adds_only(check):
    assert check(VALID[E], E, add_only=True) == []
    problems = check(VALID[R], R, add_only=True)
    grow = [p for p in problems if "mode grow only adds entries" in p]
    assert [p.split(" ")[:3] for p in grow] == [["edit", "2", "(UPDATE"], ["edit", "3", "(DELETE"]]


def test_unknown_card(check):
    problems = check([add(SKILLS[0], cites=("c1-t1-outcome", "c9-x-outcome"))], E)
    one(problems, "edit 0 (ADD skill type:twc): cites unknown card 'c9-x-outcome'; cite ids of this step's")


def test_too_few_distinct_citations(check):
    problems = check([add(SKILLS[0]), add(SKILLS[1], cites=("c1-t1-outcome", "c1-t1-outcome"))], E)
    one(problems, "edit 1 (ADD skill type:twc): cites 1 distinct card(s); cite at least 2 distinct")
    assert check([add(SKILLS[0], cites=())], E, min_citations=0) == []


def test_expand_adds_at_most_two_skills_counting_plans(check):
    edits = [add(SKILLS[0]), add(SKILLS[1]), add("Go back to the start", "plan", "task:t1")]
    one(check(edits, E), "edits 0, 1, 2: 3 skill/plan ADDs; EXPAND accepts at most 2 skill/plan ADDs")


def test_plans_per_review_are_beside_the_skill_budget(check):
    plans = [
        add("Go to the kitchen, then east", "plan", "task:t1"),
        add("Open the chest first", "plan", "task:t2"),
    ]
    edits = [add(SKILLS[0]), plans[0], add(SKILLS[1]), plans[1]]  # EXPAND: two skills and two plans
    assert check(edits, E, plans_per_review=2) == []
    one(
        check(edits, E, plans_per_review=1),
        "edits 0, 2, 3: 3 skill/plan ADDs; EXPAND accepts at most 2 skill/plan ADDs (plans count as skills, "
        "past the first 1 plans) and 1 mistake ADD",
    )
    one(check(edits, E), "edits 0, 1, 2, 3: 4 skill/plan ADDs; EXPAND accepts at most 2")
    # the free plans are plans only: a skill never takes their place
    one(
        check([add(SKILLS[0]), add(SKILLS[1])], R, plans_per_review=2),
        "edits 0, 1: 2 skill/plan ADDs; REVISE",
    )
    assert check([add(SKILLS[0]), *plans], R, plans_per_review=2) == []


def test_expand_adds_at_most_one_mistake(check):
    edits = [add("Never drop the key.", "mistake"), add("Do not eat the apple.", "mistake")]
    one(check(edits, E), "edits 0, 1: 2 mistake ADDs; EXPAND accepts at most 2 skill/plan ADDs")


def test_revise_adds_at_most_one_skill(check):
    one(check([add(SKILLS[0]), add(SKILLS[1])], R), "edits 0, 1: 2 skill/plan ADDs; REVISE accepts at most 1")


def test_expand_does_not_delete(check):
    one(check([delete("e2")], E), "edit 0 (DELETE e2): EXPAND does not delete; drop this DELETE")


def test_prune_only_deletes(check):
    problems = check([add(SKILLS[0]), update("e2", "Open containers."), delete("e3")], P)
    assert len(problems) == 2
    assert problems[0].startswith("edit 0 (ADD skill type:twc): PRUNE only deletes")
    assert problems[1].startswith("edit 1 (UPDATE e2): PRUNE only deletes")


def test_compress_adds_only_beside_an_update_or_delete(check):
    # Adding to a compressed type is refused twice over: alone, and for raising the tokens.
    problems = check([add(SKILLS[0])], C)
    assert problems[0].startswith(
        "edit 0 (ADD skill type:twc): COMPRESS adds only beside an UPDATE or DELETE"
    )
    assert "COMPRESS must lower the total" in problems[1]


def test_compress_must_lower_the_tokens(check, count_tokens):
    longer = ENTRIES[1].text + " Also look under the furniture and behind doors."
    view = [e.text for e in ENTRIES[:3]]
    before = sum(map(count_tokens, view))
    after = before - count_tokens(ENTRIES[1].text) + count_tokens(longer)
    one(
        check([update("e2", longer)], C),
        f"edit set (COMPRESS): the type's entries go from {before} to {after} tokens; COMPRESS must lower",
    )
    assert check([update("e2", "Open containers.")], C) == []


def test_task_plans_off_refuses_adds_at_task_scope(check):
    plan = add("Steps to try: open fridge -> take milk", "plan", "task:t2")
    one(
        check([plan], E, task_plans=False),
        "edit 0 (ADD plan task:t2): scaffold.task_plans is false, so nothing is added at task scope",
    )
    assert check([plan], E) == []  # on by default
    assert check([add("Look in the kitchen first.")], E, task_plans=False) == []


def test_removal_off_forbids_delete(check):
    one(
        check([delete("e2")], R, removal=False),
        "edit 0 (DELETE e2): removal is off (scaffold.removal: false), so nothing is deleted; drop",
    )


def test_removal_off_refuses_any_compress_set(check):
    one(
        check([update("e2", "Open containers.")], C, removal=False),
        "edit set (COMPRESS): removal is off (scaffold.removal: false), so a COMPRESS review may not shrink",
    )


def test_update_and_delete_need_an_entry_of_this_type(check):
    one(check([update("e9", "Anything.")], R), "edit 0 (UPDATE e9): no entry 'e9' exists; UPDATE only ids")
    one(check([delete("e4")], R), "edit 0 (DELETE e4): entry 'e4' is scoped 'type:coin', not this type's")
    one(
        check([update("e2", "Open containers."), delete("e2")], R),
        "edit 1 (DELETE e2): entry 'e2' is already edited by edit 0",
    )


def test_add_scope_must_be_this_types(check):
    one(check([add(SKILLS[0], scope="type:coin")], E), "scope 'type:coin' is not one of this type's; use one")
    one(check([add(SKILLS[0], scope="task:k1")], E), "edit 0 (ADD skill task:k1): scope 'task:k1' is not")
    one(check([add(SKILLS[0], scope="task")], E), "'general', 'task:t1', 'task:t2', 'type:twc'")
    assert check([add(SKILLS[0], scope="general")], E) == []


def test_empty_text(check):
    one(check([add("   ")], E), "edit 0 (ADD skill type:twc): text is empty")


def test_near_duplicate_of_an_entry_in_the_same_scope(check):
    near = "open every closed   container to find the items you need!"
    one(check([add(near)], E), "edit 0 (ADD skill type:twc): text is a near-duplicate of entry 'e2' in scope")
    assert check([add(near, scope="task:t1")], E) == []  # another scope: not a duplicate
    assert check([update("e2", near)], R) == []  # an entry rewritten close to its own text is fine
    entries = [*ENTRIES, entry("e5", "type:twc", SKILLS[1])]
    one(
        check([update("e2", SKILLS[1].lower())], R, entries=entries),
        "edit 0 (UPDATE e2): text is a near-duplicate of entry 'e5' in scope 'type:twc' (similarity 1.00",
    )


def test_near_duplicate_of_another_add(check):
    one(
        check([add(SKILLS[0], scope="general"), add(SKILLS[0].upper())], E),
        "edit 1 (ADD skill type:twc): text is a near-duplicate of edit 0's ADD",
    )


def test_merging_a_deleted_entry_into_an_add_is_not_a_duplicate(check):
    merged = "Open every closed container to find the items you need, then close it."
    assert check([delete("e2"), add(merged)], R) == []


def test_near_duplicate_threshold_is_inclusive(check):
    at, below = "x" * 17 + "abc", "x" * 16 + "abcd"
    assert similarity(at, "x" * 17 + "def") == 0.85
    assert similarity(below, "x" * 16 + "efgh") == 0.8
    entries = [*ENTRIES, entry("e5", "type:twc", "x" * 17 + "def")]
    one(check([add(at)], E, entries=entries), "near-duplicate of entry 'e5'")
    entries = [*ENTRIES, entry("e6", "type:twc", "x" * 16 + "efgh")]
    assert check([add(below)], E, entries=entries) == []


def test_every_problem_is_reported_at_once(check):
    edits = [add(SKILLS[0], cites=("nope",)), delete("e2"), add("", "plan", scope="type:coin")]
    problems = check(edits, E, removal=False)
    assert [p.split(": ")[0] for p in problems] == [
        "edit 0 (ADD skill type:twc)",  # unknown card
        "edit 0 (ADD skill type:twc)",  # too few citations
        "edit 1 (DELETE e2)",  # removal is off (reported instead of EXPAND's own ban)
        "edit 2 (ADD plan type:coin)",  # another type's scope
        "edit 2 (ADD plan type:coin)",  # empty text
    ]


def test_a_plan_is_task_scoped(check):
    for scope in ("type:twc", "general"):
        one(
            check([add("Go to the kitchen, take the apple.", "plan", scope)], E),
            f"edit 0 (ADD plan {scope}): a plan belongs to one task; scope it 'task:<task id>' (one of "
            f"'task:t1', 'task:t2'), or make it kind 'skill' to guide every task in scope '{scope}'",
        )
    assert check([add("Go to the kitchen, take the apple.", "plan", "task:t2")], E) == []
    assert check([add("Go to the kitchen, take the apple.", "skill", "type:twc")], E) == []


def test_the_store_rules_alone(count_tokens):
    """`edit_problems` without scopes: what the store checks against its current entries."""
    assert edit_problems([add("Plan.", "plan", "task:t9"), update("e4", "Coins first.")], ENTRIES) == []
    problems = edit_problems([add("Plan.", "plan", "type:twc"), delete("e9"), "ADD"], ENTRIES)
    assert problems == [
        "edit 0 (ADD plan type:twc): a plan belongs to one task; scope it 'task:<task id>', or make it "
        "kind 'skill' to guide every task in scope 'type:twc'",
        "edit 1 (DELETE e9): no entry 'e9' exists; DELETE only ids of the current entries (e1, e2, e3, e4)",
        "edit 2: a str is not an ADD, UPDATE or DELETE edit",
    ]


# ---- the review refuses every set the store would refuse -------------------------------------------


@pytest.fixture
def store(count_tokens):
    """A store whose current entries are ENTRIES (same ids, kinds, scopes, texts)."""
    store = ScaffoldStore(count_tokens, 256)
    store.seed([AddEdit(kind=e.kind, scope=e.scope, text=e.text) for e in ENTRIES])
    assert [(e.id, e.scope, e.text) for e in store.current.entries] == [
        (e.id, e.scope, e.text) for e in ENTRIES
    ]
    return store


STORE_REFUSES = {
    "type-scoped plan": [add("For every twc game: take, open, put.", "plan", "type:twc")],
    "general plan": [add("For every game: look first, then act.", "plan", "general")],
    "unknown entry": [update("e9", "Open containers.")],
    "two edits on one entry": [update("e2", "Open containers."), delete("e2")],
    "empty ADD text": [add("  ", "skill", "type:twc")],
    "empty UPDATE text": [update("e2", "\n")],
    "malformed scope": [add(SKILLS[0], scope="types:twc")],
    "scope with a space": [add(SKILLS[0], scope="task:t 1")],
}


@pytest.mark.parametrize("name", sorted(STORE_REFUSES))
@pytest.mark.parametrize("mode", [E, R])
def test_the_review_refuses_what_the_store_refuses(check, store, name, mode):
    edits = STORE_REFUSES[name]
    stored = store.check(edits)
    assert stored, f"the store should refuse: {name}"
    with pytest.raises(EditError):
        store.apply(edits, 1)
    reviewed = check(edits, mode)
    assert reviewed, f"the review accepted a set the store refuses: {name}"
    # The review blames the same edits for it (its messages may say more: the type's scopes and ids).
    blamed = {p.split(": ")[0] for p in reviewed}
    assert {p.split(": ")[0] for p in stored} <= blamed, (stored, reviewed)


@pytest.mark.parametrize("mode", [E, R, C, P])
def test_a_set_the_review_accepts_the_store_applies(check, store, mode):
    assert check(VALID[mode], mode) == []
    assert store.check(VALID[mode]) == []
    assert store.apply(VALID[mode], 1).number == 2


def test_the_review_never_accepts_what_the_store_refuses_on_random_sets(check, store):
    """Seeded random edit sets over plausible and broken values: review-valid implies store-valid."""
    rng = random.Random(15)
    kinds, scopes = (
        ["skill", "mistake", "plan"],
        ["general", "type:twc", "type:coin", "task:t1", "task:k1", "x"],
    )
    ids, texts = (
        ["e1", "e2", "e3", "e4", "e9"],
        ["", " ", *SKILLS, "Never drop the key.", "Steps: go -> take."],
    )
    accepted = 0
    for _ in range(3000):
        edits = []
        for _ in range(rng.randint(1, 3)):
            op = rng.choice(["ADD", "ADD", "UPDATE", "DELETE"])
            if op == "ADD":
                edits.append(add(rng.choice(texts), rng.choice(kinds), rng.choice(scopes)))
            elif op == "UPDATE":
                edits.append(update(rng.choice(ids), rng.choice(texts)))
            else:
                edits.append(delete(rng.choice(ids)))
        mode = rng.choice([E, R, C, P])
        if not check(edits, mode, min_citations=0):
            accepted += 1
            assert store.check(edits) == [], edits
    assert accepted > 50  # the sample reaches accepted sets, not only refused ones


def test_the_mode_budgets_are_the_methods():
    # The published method's budgets, which the validator, the rules reviser and the LLM reviser's
    # schema all read: a change here changes what every review may do.
    from pats.scaffold.validate import MODE_BUDGETS, ModeBudget

    assert MODE_BUDGETS == {
        ReviewMode.EXPAND: ModeBudget(skills=2, mistakes=1, update=True, delete=False),
        ReviewMode.REVISE: ModeBudget(skills=1, mistakes=1, update=True, delete=True),
        ReviewMode.COMPRESS: ModeBudget(skills=None, mistakes=None, update=True, delete=True),
        ReviewMode.PRUNE: ModeBudget(skills=0, mistakes=0, update=False, delete=True),
    }


@pytest.mark.parametrize("mode", [ReviewMode.REVISE, ReviewMode.COMPRESS, ReviewMode.PRUNE])
def test_modes_that_delete_accept_a_delete(check, mode):
    assert check([delete("e2")], mode) == []


def test_texts_are_compared_lowercased_with_runs_of_space_as_one():
    from pats.scaffold.validate import normalize

    assert normalize("  Open\tthe   DOOR\n first ") == "open the door first"
    assert similarity("Open the door first.", "open  THE door\nfirst.") == 1.0


def test_the_task_plans_and_grow_rules_come_with_the_other_problems(check):
    # Every problem at once: the rules checked last do not replace what was found before them.
    plan = add("Steps to try: open fridge -> take milk", "plan", "task:t2", cites=(CITES[0], "nope"))
    problems = check([plan], E, task_plans=False)
    assert len(problems) == 2 and "nope" in problems[0] and "scaffold.task_plans is false" in problems[1]
    problems = check([update("e2", "Open containers.", cites=(CITES[0], "nope"))], E, add_only=True)
    assert len(problems) == 2 and "nope" in problems[0] and "mode grow only adds" in problems[1]


# ---- each message whole: a user (or an LLM reviser, which gets them back as feedback) reads all of it --


def test_the_messages_read_whole(check):
    assert check([add(SKILLS[0], cites=(CITES[0], "c9"))], E) == [
        "edit 0 (ADD skill type:twc): cites unknown card 'c9'; cite ids of this step's cards "
        "(e.g. c1-k1-outcome, c1-t1-contrast, c1-t1-outcome)"
    ]
    assert check([add("Steps: open fridge", "plan", "task:t2")], E, task_plans=False) == [
        "edit 0 (ADD plan task:t2): scaffold.task_plans is false, so nothing is added at task scope; write "
        "guidance for the whole type (scope type:twc) or drop this ADD"
    ]
    assert check([update("e9", "Anything.")], R) == [
        "edit 0 (UPDATE e9): no entry 'e9' exists; UPDATE only ids of this type's entries (e1, e2, e3)"
    ]
    assert check([delete("e4")], R) == [
        "edit 0 (DELETE e4): entry 'e4' is scoped 'type:coin', not this type's; edit only entries scoped "
        "general, task:t1, task:t2, type:twc"
    ]
    assert edit_problems([add(SKILLS[0], scope="types:twc")], ENTRIES) == [
        "edit 0 (ADD skill types:twc): scope 'types:twc' is not 'general', 'type:<task type>' or "
        "'task:<task id>' (no spaces in the name)"
    ]


def test_with_no_cards_the_message_says_there_are_none(count_tokens):
    problems = validate_edits(
        [add(SKILLS[0])],
        E,
        ENTRIES,
        [],
        count_tokens,
        removal=True,
        min_citations=0,
        task_type="twc",
        plans_per_review=0,
    )
    assert problems == [
        f"edit 0 (ADD skill type:twc): cites unknown card '{c}'; cite ids of this step's cards "
        "(e.g. none this step)"
        for c in CITES
    ]


@pytest.mark.parametrize("n", [0, 30, 31])
def test_an_unknown_entry_lists_at_most_30_known_ids(n):
    entries = [entry(f"e{i}", "general", f"Entry number {i}.") for i in range(n)]
    known = ", ".join(f"e{i}" for i in range(min(n, 30))) + (", ..." if n > 30 else "") or "none"
    assert edit_problems([delete("x")], entries) == [
        f"edit 0 (DELETE x): no entry 'x' exists; DELETE only ids of the current entries ({known})"
    ]
    assert known.count(", ...") == (n == 31) and (known == "none") == (n == 0)


def test_an_item_that_is_no_edit_does_not_stop_the_check_of_the_next():
    assert edit_problems(["ADD", delete("e9"), add("  ")], ENTRIES) == [
        "edit 0: a str is not an ADD, UPDATE or DELETE edit",
        "edit 1 (DELETE e9): no entry 'e9' exists; DELETE only ids of the current entries (e1, e2, e3, e4)",
        "edit 2 (ADD skill type:twc): text is empty; write the guidance text, or DELETE instead",
    ]


def test_compress_refuses_a_set_that_keeps_the_token_count(check, count_tokens):
    same = "Open every closed container to find the items you want."  # e2 with one word swapped
    assert count_tokens(same) == count_tokens(ENTRIES[1].text), "the test needs an equal count"
    problems = check([update("e2", same)], C)
    assert len(problems) == 1 and "COMPRESS must lower the total" in problems[0], problems


def test_the_mode_and_duplicate_messages_read_whole(check):
    assert check([add(SKILLS[0])], P) == [
        "edit 0 (ADD skill type:twc): PRUNE only deletes; drop this edit and DELETE the type's least useful "
        "entries until it is under budget"
    ]
    assert check([add(SKILLS[0])], C)[0] == (
        "edit 0 (ADD skill type:twc): COMPRESS adds only beside an UPDATE or DELETE of what it replaces; "
        "merge into an existing entry with UPDATE, or DELETE the entries it replaces"
    )
    assert check([add(SKILLS[0]), add(SKILLS[1])], R) == [
        "edits 0, 1: 2 skill/plan ADDs; REVISE accepts at most 1 skill/plan ADDs (plans count as skills) "
        "and 1 mistake ADD; keep the best-supported ones"
    ]
    assert check([delete("e2")], E) == [
        "edit 0 (DELETE e2): EXPAND does not delete; drop this DELETE (deletions are for REVISE, COMPRESS "
        "and PRUNE) or UPDATE the entry instead"
    ]
    same = ENTRIES[1].text
    assert check([add(same)], E) == [
        "edit 0 (ADD skill type:twc): text is a near-duplicate of entry 'e2' in scope 'type:twc' (similarity "
        "1.00 >= 0.85); UPDATE 'e2' instead, or say something it does not"
    ]
    assert check([add(SKILLS[0]), add(SKILLS[0].upper())], E) == [
        "edit 1 (ADD skill type:twc): text is a near-duplicate of edit 0's ADD (similarity 1.00 >= 0.85); "
        "keep one of the two"
    ]


def test_an_edit_of_an_unknown_entry_does_not_stop_the_duplicate_check_of_the_next(check):
    problems = check([update("e9", "Anything at all."), add(ENTRIES[1].text)], R)
    assert len(problems) == 2, problems
    assert "no entry 'e9'" in problems[0] and "near-duplicate of entry 'e2'" in problems[1]


def test_an_update_is_checked_against_every_entry_not_just_up_to_one_updated_later(count_tokens):
    entries = [
        entry("a1", "type:twc", "Open every closed container first."),
        entry("a2", "type:twc", "Carry one item at a time."),
        entry("a3", "type:twc", "Walk to the kitchen before anything else."),
    ]
    # Edit 0 copies a3; a2, between them in order, is updated by the later edit 1 (skipped for edit 0).
    edits = [update("a1", entries[2].text), update("a2", "Drop what you do not need.")]
    problems = validate_edits(
        edits,
        R,
        entries,
        CARDS,
        count_tokens,
        removal=True,
        min_citations=2,
        task_type="twc",
        plans_per_review=0,
    )
    assert len(problems) == 1 and "edit 0 (UPDATE a1): text is a near-duplicate of entry 'a3'" in problems[0]


def test_a_delete_or_an_empty_text_does_not_stop_the_duplicate_check_of_the_next(check):
    for first in (delete("e1"), add("   ")):
        problems = check([first, add(ENTRIES[1].text)], R)
        assert any(
            "edit 1 (ADD skill type:twc): text is a near-duplicate of entry 'e2'" in p for p in problems
        )
