"""The scripted LLM judge/reviser that pats.testing offers users answer as scripted."""

from __future__ import annotations

from pats.testing import evidence_card, scripted_judge, scripted_reviser
from pats.types import AddEdit, Assessment, EvidenceCard, ReviewMode, RolloutGroup, ScaffoldEntry, Task


def card(kind: str) -> EvidenceCard:
    return evidence_card("t1", kind, text=f"{kind} card", scaffold_version="v")


async def test_scripted_reviser_returns_the_scripted_edits():
    edit = {
        "op": "ADD",
        "kind": "skill",
        "scope": "type:twc",
        "text": "Open containers before putting.",
        "cites": ["c1-t1-outcome", "c1-t1-failure"],
    }
    reviser = scripted_reviser([[edit]])
    assessment = Assessment(task_type="twc", mode=ReviewMode.EXPAND, ema_success=0.1, pressure=0.0)
    edits = await reviser.revise(1, assessment, [card("outcome"), card("failure")], [])
    assert edits == [
        AddEdit(
            kind="skill",
            scope="type:twc",
            text="Open containers before putting.",
            cites=("c1-t1-outcome", "c1-t1-failure"),
        )
    ]


async def test_scripted_judge_grades_entries():
    entry = ScaffoldEntry(
        id="e1", kind="skill", scope="type:twc", text="Look first.", tokens=3, created_step=0, updated_step=0
    )
    verdict = {
        "entry_id": "e1",
        "label": "redundant",
        "reason": "solved without it",
        "cites": ["c1-t1-outcome", "c1-t1-failure"],
    }
    judge = scripted_judge([[verdict]])
    group = RolloutGroup(
        step=1, task=Task(id="t1", type="twc", split="train", env="twx"), scaffold_version="v", rollouts=()
    )
    (assessment,) = await judge.assess(1, [group], [card("outcome"), card("failure")], [entry])
    assert [(v.entry_id, v.label) for v in assessment.verdicts] == [("e1", "redundant")]
