"""bench/studies/stage1_scaffold.py's counts on tiny made-up cells: which mistakes contradict which
plans, a game's next occurrence after a win, first actions by side of the group, and what a type
skill's label counts against the games actually won."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.*

from bench.studies import stage1_scaffold as study  # noqa: E402
from pats.logging.events import EditEvent  # noqa: E402
from pats.reviser.rules import MISTAKES  # noqa: E402
from pats.types import AddEdit, ExpertData, ScaffoldEntry  # noqa: E402


def entry(kind, text, scope="type:twc"):
    return ScaffoldEntry(id=text, kind=kind, scope=scope, text=text, tokens=1,
                         created_step=0, updated_step=0)  # fmt: skip


def plan(text):
    return entry("plan", text, scope="task:g1")


REPEAT_LOOK = entry("mistake", MISTAKES["repeated_action"].format(x="look around"))
REPEAT_INVENTORY = entry("mistake", MISTAKES["repeated_action"].format(x="inventory"))
CYCLE = entry("mistake", MISTAKES["loop"].format(x="Inventory | look around"))
CYCLE_ROLES = entry("mistake", MISTAKES["loop"].format(x="take <object> | put <object> in <place>"))
EXPERT = plan("Steps to try: look around -> take kettle -> take saucepan")
WON = plan("Steps that worked: take kettle -> inventory -> put kettle in counter")


def test_a_repeat_mistake_contradicts_a_plan_starting_with_its_action_strictly_and_any_step_broadly():
    assert study.contradictions([REPEAT_LOOK, EXPERT]) == {"strict": 1, "broad": 1}
    assert study.contradictions([REPEAT_INVENTORY, WON]) == {"strict": 0, "broad": 1}  # a later step
    assert study.contradictions([REPEAT_INVENTORY, EXPERT]) == {"strict": 0, "broad": 0}


def test_a_cycle_mistake_counts_broadly_by_its_concrete_actions_only():
    assert study.contradictions([CYCLE, EXPERT]) == {"strict": 0, "broad": 1}  # case aside
    assert study.contradictions([CYCLE_ROLES, WON]) == {"strict": 0, "broad": 0}  # roles name no action
    assert study.contradictions([entry("skill", "look around first"), EXPERT]) == {"strict": 0, "broad": 0}


def group(step, task, rewards, view=(), expert=None):
    return study.Group(step=step, task=task, rewards=tuple(rewards), view=tuple(view), expert=expert)


def test_recurrence_reads_each_next_occurrence_by_whether_the_one_before_was_won():
    groups = [
        group(0, "a", [1, 0]),
        group(4, "a", [1, 1]),  # after a win
        group(9, "a", [0, 0]),  # after a win
        group(1, "b", [0, 0]),
        group(2, "b", [1, 0]),  # after no win
        group(3, "c", [0, 0]),  # never recurs
    ]
    found = study.recurrence(groups)
    assert found["next_after_a_win"] == {"n": 4, "share": 0.5}
    assert found["next_after_no_win"] == {"n": 2, "share": 0.5}
    assert found["after_first_win"] == {"n": 4, "share": 0.5}  # a's steps 4 and 9; b's has no later one


def cell(groups, edits=(), steps=3):
    return study.Cell(condition="stage1-pats-expert", seed=0, probes=2, steps=steps, groups=tuple(groups),
                      edits=tuple(edits), versions=(), heldout={}, at_start={})  # fmt: skip


def expert(*followed):
    plan_ = ("look around", "take kettle", "put kettle in counter")
    return ExpertData(plan=plan_, followed={f"r{i}": n for i, n in enumerate(followed)}, first_departure=None,
                      followed_fraction_mean=0.0)  # fmt: skip


def test_following_splits_probes_from_scaffolded_rollouts_and_plan_groups_from_others():
    groups = [
        # probes (the first two) then scaffolded rollouts, under the expert plan
        group(0, "a", [0, 0, 1, 0], view=[EXPERT], expert=expert(0, 1, 3, 2)),
        group(2, "b", [0, 1, 0, 0], view=[WON], expert=expert(1, 0, 0, 0)),  # a plan, not the expert's
    ]
    found = study.following([cell(groups)])
    shown = found["all steps"]["expert plan shown, scaffolded"]
    assert shown == {"look_around_first": {"n": 2, "share": 1.0}, "won": {"n": 2, "share": 0.5}}
    assert found["all steps"]["expert plan shown, probes"]["look_around_first"] == {"n": 2, "share": 0.5}
    assert found["all steps"]["no expert plan, probes"]["won"] == {"n": 2, "share": 0.5}
    assert list(found["steps 2-2"]) == [
        "no expert plan, probes",
        "no expert plan, scaffolded",
    ]  # the last third


def test_a_label_is_read_against_the_games_its_review_had_won():
    text = "How twc games were won (1 of 4 won games; <object> and <place> stand for this game's own): x -> y"
    edit = EditEvent(step=1, edit=AddEdit(kind="skill", scope="type:twc", text=text))
    groups = [group(0, "a", [1, 0]), group(1, "b", [0, 0]), group(1, "c", [0, 1]), group(1, "a", [0, 0])]
    (found,) = study.labels([cell(groups, [edit])])
    assert found == {"cell": "stage1-pats-expert-s0", "step": 1, "label": "1 of 4 won games",
                     "games_called_won": 4, "games_in_review_won": 1, "games_won_so_far": 2}  # fmt: skip
