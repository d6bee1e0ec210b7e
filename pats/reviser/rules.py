"""The rules reviser: deterministic, offline edits built from one task type's evidence cards.

Guidance (EXPAND and REVISE, the type is failing):
- a task whose group had a success gets a `plan` scoped `task:<id>`: the best rollout's actions with
  immediate repeats removed ("Steps that worked: a -> b -> c"), citing its contrast and outcome cards;
- tasks with no success and an expert card (privileged) get a plan from the expert plan's prefix;
- a dominant failure mode over the tasks with no success gives one `mistake` scoped `type:<t>`.
Removal (mode pats with removal on; never in EXPAND): DELETE the entries scoped to a task whose group
all passed (the plan kills the group's variation), the type's most recent non-general entry when the
utility cards say the scaffold does not help (mean delta <= 0), in COMPRESS the type's oldest
non-general entry, and in PRUNE the oldest non-general entries until the type is under budget.
Every edit cites at least `min_citations` distinct cards of the type, or is skipped.

Where it departs from (or fixes what is open in) the published method:
- It never UPDATEs or merges; COMPRESS withdraws one entry per review (plus what the evidence marks
  redundant), so a solved type loses its guidance gradually and the judge can turn back to REVISE.
- `general` entries are never deleted by a type's review: other types still see them.
- Plans are capped at `MAX_PLAN_ACTIONS` actions; existing task plans are left as they are.
- Failures of kind `env_error` are the environment's, not the policy's, and make no mistake entry.
- `feedback` is ignored: the rules reviser is correct by construction (it is what the LLM reviser
  falls back to).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pats.reviser.validate import MODE_BUDGETS, is_near_duplicate, type_entries
from pats.spec.models import ScaffoldBudget
from pats.types import (
    AddEdit,
    Assessment,
    DeleteEdit,
    Edit,
    EvidenceCard,
    ReviewMode,
    ScaffoldEntry,
)

MAX_PLAN_ACTIONS = 16  # a plan longer than this is cut: its start is what a failing policy misses
EXCERPT_CHARS = 80
GUIDANCE_MODES = (ReviewMode.EXPAND, ReviewMode.REVISE)  # the type is failing: add guidance
REPEAT_COUNT = re.compile(r"\s*\(x\d+\)$")  # the cards' " (x3)" suffix: the lesson is the action
CITE_ORDER = ("outcome", "utility", "contrast", "failure", "expert")  # filler citations, most apt first

MISTAKES = {
    "repeated_action": "Do not repeat '{x}': if an action changed nothing, try a different one.",
    "loop": "Do not cycle through the same actions ({x}); from a state you have seen, try something new.",
    "invalid_action": "Use only actions the game accepts; check the available actions first ({x}).",
    "out_of_turns": "Go straight for the goal: episodes ran out of turns while exploring ({x}).",
    "malformed_output": "Answer with exactly one action in the expected format; this could not be read: {x}.",
}


class RulesReviser:
    """Reviser protocol implementation. `mode_of_scaffold`: static never edits, grow only adds."""

    def __init__(
        self,
        removal: bool,
        min_citations: int,
        mode_of_scaffold: Literal["static", "grow", "pats"] = "pats",
        budget: ScaffoldBudget | None = None,
    ):
        self.removal = removal
        self.min_citations = min_citations
        self.mode_of_scaffold = mode_of_scaffold
        self.budget = budget

    async def revise(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
        feedback: Sequence[str] = (),
    ) -> list[Edit]:
        if self.mode_of_scaffold == "static":
            return []
        t = assessment.task_type
        ev = _Evidence([c for c in cards if c.task_type == t], self.min_citations)
        view = type_entries(entries, t, ev.task_ids)
        mode = ReviewMode(assessment.mode)
        edits: list[Edit] = []
        if mode in GUIDANCE_MODES:
            edits += self._guidance(t, mode, ev, view)
        if self.removal and self.mode_of_scaffold == "pats" and mode is not ReviewMode.EXPAND:
            edits += self._removals(mode, ev, view)
        return edits

    def _guidance(self, t: str, mode: ReviewMode, ev: _Evidence, view: list[ScaffoldEntry]) -> list[AddEdit]:
        max_skills, max_mistakes = MODE_BUDGETS[mode].skills, MODE_BUDGETS[mode].mistakes
        planned = {e.scope for e in view if e.kind == "plan"}
        open_tasks = [k for k in ev.task_ids if f"task:{k}" not in planned and not ev.all_passed(k)]
        # Plans from the policy's own successes first (rarest success first), then from expert plans.
        by_success = sorted(open_tasks, key=lambda k: (ev.success_rate(k), k))
        candidates = [self._success_plan(k, ev) for k in by_success]
        candidates += [self._expert_plan(k, ev) for k in open_tasks]
        mistake = self._mistake(t, ev, view)
        if mistake is not None:
            candidates.append(mistake)

        kept: list[AddEdit] = []
        for add in filter(None, candidates):
            n_kind = sum((a.kind == "mistake") == (add.kind == "mistake") for a in kept)
            if n_kind >= (max_mistakes if add.kind == "mistake" else max_skills):
                continue
            same_scope = [e.text for e in view if e.scope == add.scope]
            if any(is_near_duplicate(add.text, x) for x in same_scope + [a.text for a in kept]):
                continue  # never re-add what is already there: skip instead
            kept.append(add)
        return kept

    def _success_plan(self, task_id: str, ev: _Evidence) -> AddEdit | None:
        contrast = ev.card(task_id, "contrast")
        if contrast is None:
            return None
        best, worst = contrast.data.get("best") or {}, contrast.data.get("worst") or {}
        outcome = ev.card(task_id, "outcome")
        mixed = outcome is not None and 0 < outcome.data.get("success_rate", 0) < 1
        if not best.get("success") or not (mixed or not worst.get("success")):
            return None
        actions = key_actions(best.get("actions") or [])
        if not actions:
            return None
        cites = ev.cites(task_id, [contrast, outcome])
        if cites is None:
            return None
        return AddEdit(
            kind="plan", scope=f"task:{task_id}", text="Steps that worked: " + actions, cites=cites
        )

    def _expert_plan(self, task_id: str, ev: _Evidence) -> AddEdit | None:
        expert, outcome = ev.card(task_id, "expert"), ev.card(task_id, "outcome")
        if expert is None or ev.had_success(task_id):
            return None
        plan = list(expert.data.get("plan") or [])
        departure = expert.data.get("first_departure")
        if departure:  # up to a few steps past where the policy first left the plan
            plan = plan[: int(departure.get("turn", 0)) + 3]
        actions = key_actions(plan)
        cites = ev.cites(task_id, [expert, outcome])
        if not actions or cites is None:
            return None
        return AddEdit(kind="plan", scope=f"task:{task_id}", text="Steps to try: " + actions, cites=cites)

    def _mistake(self, t: str, ev: _Evidence, view: list[ScaffoldEntry]) -> AddEdit | None:
        failing = [k for k in ev.task_ids if not ev.had_success(k) and ev.card(k, "failure") is not None]
        counts = {k: ev.card(k, "failure").data.get("counts") or {} for k in failing}
        totals: dict[str, int] = {}
        for k in failing:
            for failure_mode, n in counts[k].items():
                if failure_mode in MISTAKES and n:
                    totals[failure_mode] = totals.get(failure_mode, 0) + n
        existing = [e.text for e in view if e.scope == f"type:{t}"]
        # The dominant mode first; a mode whose lesson is already in the scaffold gives way to the next.
        for failure_mode in sorted(totals, key=lambda m: (-totals[m], m)):
            showing = [k for k in failing if (counts[k].get(failure_mode) or 0) > 0]
            excerpt = _excerpt(ev.card(k, "failure") for k in showing)
            text = MISTAKES[failure_mode].format(
                x=excerpt.get(failure_mode) or failure_mode.replace("_", " ")
            )
            if any(is_near_duplicate(text, x) for x in existing):
                continue
            primary = [ev.card(k, kind) for k in showing for kind in ("failure", "outcome")]
            cites = ev.cites(None, primary)
            if cites is not None:
                return AddEdit(kind="mistake", scope=f"type:{t}", text=text, cites=cites)
        return None

    def _removals(self, mode: ReviewMode, ev: _Evidence, view: list[ScaffoldEntry]) -> list[DeleteEdit]:
        removable = [e for e in view if e.scope != "general" and e.text.strip()]
        out: list[DeleteEdit] = []
        gone: set[str] = set()

        def delete(entry: ScaffoldEntry, reason: str, primary: list, task_id: str | None = None) -> None:
            cites = ev.cites(task_id, primary)
            if entry.id not in gone and cites is not None:
                out.append(DeleteEdit(entry_id=entry.id, reason=reason, cites=cites))
                gone.add(entry.id)

        for e in removable:
            task_id = e.scope.removeprefix("task:")
            if e.scope.startswith("task:") and ev.all_passed(task_id):
                delete(
                    e,
                    "its task's group all passed: the plan only removes variation",
                    [ev.card(task_id, "outcome"), ev.card(task_id, "utility")],
                    task_id,
                )
        utility = ev.of_type("utility")
        deltas = [c.data["delta"] for c in utility if c.data.get("delta") is not None]
        if deltas and sum(deltas) / len(deltas) <= 0:
            left = [e for e in removable if e.id not in gone]
            newest = sorted(left, key=lambda e: (e.updated_step, e.created_step, e.id))
            if newest:
                delete(newest[-1], "the scaffold does not raise success (utility <= 0)", list(utility))

        oldest = sorted((e for e in removable if e.id not in gone), key=lambda e: (e.created_step, e.id))
        if mode is ReviewMode.COMPRESS and not gone and oldest:
            delete(oldest[0], "the type is solved: withdraw its oldest guidance", ev.of_type("outcome"))
        if mode is ReviewMode.PRUNE:
            left = [e for e in view if e.id not in gone]
            for e in oldest:
                if self.budget is not None and _under_budget(left, self.budget):
                    break
                delete(
                    e, "the type is over its scaffold budget: drop the oldest entry", ev.of_type("outcome")
                )
                left = [x for x in left if x.id not in gone]
                if self.budget is None:
                    break  # without a budget to aim for, one entry per review
        return out


def _under_budget(entries: Sequence[ScaffoldEntry], budget: ScaffoldBudget) -> bool:
    """Under budget is what stops the judge asking for PRUNE: both ratios below 1."""
    return len(entries) < budget.max_entries and sum(e.tokens for e in entries) < budget.max_tokens


def key_actions(actions: Sequence[str]) -> str:
    """Actions with blanks and immediate repeats removed, joined by arrows, capped in length."""
    kept: list[str] = []
    for a in (a.strip() for a in actions):
        if a and (not kept or kept[-1] != a):
            kept.append(a)
    text = " -> ".join(kept[:MAX_PLAN_ACTIONS])
    return text + (" -> ..." if len(kept) > MAX_PLAN_ACTIONS else "")


def _excerpt(failure_cards) -> dict[str, str]:
    """The first excerpt per failure mode, on one line, without its repeat count, cut to EXCERPT_CHARS."""
    out: dict[str, str] = {}
    for card in failure_cards:
        for ex in card.data.get("examples") or []:
            text = REPEAT_COUNT.sub("", " ".join(str(ex.get("excerpt", "")).split()))
            if text and ex.get("mode") not in out:
                out[ex.get("mode")] = text[:EXCERPT_CHARS]
    return out


class _Evidence:
    """One type's cards, indexed by task and card type, and the citation rule."""

    def __init__(self, cards: Sequence[EvidenceCard], min_citations: int):
        self.cards = list(cards)
        self.min_citations = min_citations
        self.by_task: dict[str, dict[str, EvidenceCard]] = {}
        for c in self.cards:
            self.by_task.setdefault(c.task_id, {}).setdefault(c.type, c)
        self.task_ids = sorted(self.by_task)

    def card(self, task_id: str, card_type: str) -> EvidenceCard | None:
        return self.by_task.get(task_id, {}).get(card_type)

    def of_type(self, card_type: str) -> list[EvidenceCard]:
        return [c for c in self.cards if c.type == card_type]

    def success_rate(self, task_id: str) -> float:
        outcome = self.card(task_id, "outcome")
        return float(outcome.data.get("success_rate", 0.0)) if outcome else 0.0

    def all_passed(self, task_id: str) -> bool:
        outcome = self.card(task_id, "outcome")
        return bool(outcome and outcome.data.get("all_passed"))

    def had_success(self, task_id: str) -> bool:
        contrast = self.card(task_id, "contrast")
        best = (contrast.data.get("best") or {}) if contrast else {}
        return self.success_rate(task_id) > 0 or bool(best.get("success"))

    def cites(self, task_id: str | None, primary: Sequence[EvidenceCard | None]) -> tuple[str, ...] | None:
        """The primary cards' ids, topped up to min_citations from the task's (then the type's) other
        cards; None when the type has too few distinct cards."""
        ids = [c.id for c in primary if c is not None]
        if len(set(ids)) < self.min_citations:
            same_task = [c for c in self.cards if task_id is not None and c.task_id == task_id]
            pool = same_task + sorted(self.cards, key=lambda c: (CITE_ORDER.index(c.type), c.id))
            for c in pool:
                if len(set(ids)) >= self.min_citations:
                    break
                ids.append(c.id)
        ids = list(dict.fromkeys(ids))
        return tuple(ids) if len(ids) >= self.min_citations else None
