"""No entry of a view warns against what another prescribes (issue 58, item 4): the one validator's rule,
the rules reviser that no longer writes such a pair, and Stage 1's committed reviews replayed through
today's validator (bench/results/sweeps/stage1, in the repository)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pats.logging.events import EditEvent, read_events
from pats.reviser import RulesReviser
from pats.reviser.bundles import record
from pats.scaffold import ScaffoldStore
from pats.scaffold.plans import prescribed_actions, warned_actions
from pats.scaffold.validate import contradictions, shares_view, validate_edits
from pats.testing import evidence_card
from pats.types import AddEdit, Assessment, DeleteEdit, ReviewMode, ScaffoldEntry, UpdateEdit

REPO = Path(__file__).resolve().parents[1]
STAGE1 = REPO / "bench" / "results" / "sweeps" / "stage1"
# The pair a Stage 1 view held (stage1-pats-expert-s0, step 22): a plan that opens with 'look around'
# and a type mistake against repeating it.
OLD_PLAN = "Steps to try: look around -> take dirty brown blazer -> take dirty dress pants"
REPEAT = "Do not repeat 'look around': if an action changed nothing, try a different one."


def entry(id: str, kind: str, scope: str, text: str) -> ScaffoldEntry:
    return ScaffoldEntry(id=id, kind=kind, scope=scope, text=text, tokens=10, created_step=0, updated_step=0)


def cards(*tasks: str):
    return [evidence_card(t, kind, "twc", step=3) for t in tasks for kind in ("outcome", "failure")]


def check(edits, entries, tasks=("t1", "t2"), mode=ReviewMode.REVISE):
    return validate_edits(edits, mode, entries, cards(*tasks), lambda s: len(s.split()), removal=True,
                          min_citations=2, task_type="twc", plans_per_review=4)  # fmt: skip


def test_what_an_entry_warns_against_and_what_it_prescribes():
    assert warned_actions("mistake", REPEAT) == {"look around"}
    assert prescribed_actions("plan", OLD_PLAN) == {
        "look around",
        "take dirty brown blazer",
        "take dirty dress pants",
    }
    skill = ("How twc games were won (1 of 4 won games; <object> and <place> stand for this game's own): "
             "look around -> take <object> (2 times) -> put <object> in <place> (2 times)")  # fmt: skip
    assert prescribed_actions("skill", skill) == {"look around", "take <object>", "put <object> in <place>"}
    assert warned_actions("skill", "Open the fridge first. Never 'eat apple' before you 'take apple'.") == {
        "eat apple", "take apple",
    }  # fmt: skip
    assert warned_actions("skill", "Say 'take apple' to take it.") == set()  # no negation: not a warning
    assert prescribed_actions("mistake", "Avoid: a -> b") == set()
    assert shares_view("type:twc", "task:t1") and shares_view("task:t1", "task:t1")
    assert not shares_view("task:t1", "task:t2")


def test_the_stage1_pair_is_refused_either_way_round():
    cites = ("c3-t1-outcome", "c3-t1-failure")
    plan = entry("e13", "plan", "task:t1", OLD_PLAN)
    problems = check([AddEdit(kind="mistake", scope="type:twc", text=REPEAT, cites=cites)], [plan])
    assert problems == [
        "edit 0 (ADD mistake type:twc): it warns against 'look around', which entry 'e13' (task:t1) prescribes "
        "in the same view; drop one of the two, or DELETE or UPDATE the entry in this set so the view says one thing"
    ]
    mistake = entry("e40", "mistake", "type:twc", REPEAT)
    added = check([AddEdit(kind="plan", scope="task:t1", text=OLD_PLAN, cites=cites)], [mistake])
    assert (
        len(added) == 1
        and "it prescribes 'look around', which entry 'e40' (type:twc) warns against" in added[0]
    )
    # Two ADDs of one set, an UPDATE that writes the warning, and a set that deletes the plan as it warns.
    both = [AddEdit(kind="plan", scope="task:t1", text=OLD_PLAN, cites=cites),
            AddEdit(kind="mistake", scope="type:twc", text=REPEAT, cites=cites)]  # fmt: skip
    assert any("edit 0's ADD (task:t1) prescribes" in p for p in check(both, []))
    other = entry("e41", "mistake", "type:twc", "Do not loop.")
    assert check([UpdateEdit(entry_id="e41", text=REPEAT, cites=cites)], [plan, other])
    assert check([DeleteEdit(entry_id="e13", reason="r", cites=cites),
                  AddEdit(kind="mistake", scope="type:twc", text=REPEAT, cites=cites)], [plan]) == []  # fmt: skip
    # Another task's plan is never in the same view as this task's warning.
    own = AddEdit(kind="mistake", scope="task:t2", text=REPEAT, cites=("c3-t2-outcome", "c3-t2-failure"))
    assert check([own], [plan]) == []


async def test_the_rules_reviser_writes_no_warning_against_a_plan_of_the_view():
    failing = [evidence_card("t1", "outcome", "twc", step=3, n=4, success_rate=0.0, all_failed=True),
               evidence_card("t1", "failure", "twc", step=3, failed_rollouts=4,
                             counts={"repeated_action": 3, "out_of_turns": 1},
                             examples=[{"mode": "repeated_action", "rollout_id": "r1", "turn": 2,
                                        "excerpt": "look around (x3)"},
                                       {"mode": "out_of_turns", "rollout_id": "r1", "turn": 9,
                                        "excerpt": "stopped after 10 turns, last: look around"}])]  # fmt: skip
    assessment = Assessment(task_type="twc", mode=ReviewMode.EXPAND, ema_success=0.0, pressure=0.1)
    alone = await RulesReviser(True, 2).revise(3, assessment, failing, [])
    assert [e.text for e in alone if e.kind == "mistake"] == [REPEAT]  # without the plan it is written
    edits = await RulesReviser(True, 2).revise(
        3, assessment, failing, [entry("e13", "plan", "task:t1", OLD_PLAN)]
    )
    mistakes = [e.text for e in edits if isinstance(e, AddEdit) and e.kind == "mistake"]
    assert mistakes and REPEAT not in mistakes  # the next failure mode's lesson instead
    assert mistakes[0].startswith("Go straight for the goal")


def replay(run_dir: Path) -> tuple[list[str], ScaffoldStore]:
    """Every committed edit set of a Stage 1 cell, in step order, through today's validator into a
    fresh store; a refused set is skipped (its entries never exist, and later edits of them are
    dropped). Returns the refusals' problems and the store."""
    bundles = {b.step: b for b in record(run_dir)}
    committed: dict[int, list] = {}
    for e in read_events(run_dir / "events.jsonl", EditEvent):
        committed.setdefault(e.step, []).append(e.edit)
    count = lambda s: len(s.split())  # noqa: E731  (the validator only compares token totals here)
    store = ScaffoldStore(count, 200)
    ids: dict[str, str | None] = {}  # the run's entry id -> the replay's (None: its set was refused)
    next_run_id, refused = 1, []
    for step in sorted(committed):
        b = bundles[step]
        edits, adds = [], []
        for edit in committed[step]:
            if isinstance(edit, AddEdit):
                adds.append(f"e{next_run_id}")
                next_run_id += 1
                edits.append(edit)
            elif ids.get(edit.entry_id):
                edits.append(edit.model_copy(update={"entry_id": ids[edit.entry_id]}))
        sc = b.scaffold
        problems = validate_edits(edits, ReviewMode(b.assessment.mode), store.current.entries, b.cards, count,
                                  removal=sc.removes, min_citations=sc.min_citations, task_type=b.task_type,
                                  task_plans=sc.task_plans, plans_per_review=sc.plans_per_review)  # fmt: skip
        if problems:
            refused += problems
            ids.update(dict.fromkeys(adds))
            continue
        before = {e.id for e in store.current.entries}
        version = store.apply(edits, step)
        new = [e.id for e in version.entries if e.id not in before]
        ids.update(zip(adds, new, strict=True))
    return refused, store


@pytest.mark.parametrize("cell", ["stage1-pats-expert-s0", "stage1-pats-expert-s1", "stage1-pats-expert-s2",
                                  "stage1-pats-s0", "stage1-pats-s1", "stage1-pats-s2"])  # fmt: skip
def test_replayed_stage1_reviews_never_leave_a_contradiction_in_the_store(cell):
    refused, store = replay(STAGE1 / cell)
    for version in store.versions():
        shown = [(e.id, e.kind, e.scope, e.text) for e in version.entries]
        for e in version.entries:
            others = [o for o in shown if o[0] != e.id]
            assert contradictions(e.kind, e.scope, e.text, others) == [], (cell, version.number, e.id)
    if cell == "stage1-pats-expert-s0":  # the pair the issue quotes was committed there: today it is refused
        assert any("it warns against 'look around'" in p for p in refused), refused
