"""The rules reviser: deterministic, offline edits built from one task type's evidence cards.

Guidance (EXPAND and REVISE, the type is failing), written so that it can reach other games:
- a `skill` scoped `type:<t>`: the family-level pattern of the type's winning trajectories (and, with
  the privileged expert card, the expert plans), with each game's own objects replaced by their roles
  (pats.reviser.abstract: "take <object> -> put <object> in <place>"; arguments seen in several
  tasks' actions, such as `coin` or `cookbook`, stay as they are);
- a task whose group had a success gets a `plan` scoped `task:<id>`: the winning rollout's path
  without its detours (pats.scaffold.plans.plan_of: "Steps that worked: a -> b -> c"); it helps only
  when that task recurs;
- tasks with no success and an expert card (privileged) get a plan from the whole expert plan, every
  step that moves the game (so with the expert card off no plan comes from expert data;
  `task_plans=False`, the spec's scaffold.task_plans, writes no task plans at all: only guidance that
  can reach other games);
- the skill's label counts what it pooled: won episodes apart from expert plans, and "won" only of
  the policy's own wins;
- a dominant failure mode over the tasks with no success gives one `mistake` scoped `type:<t>`, its
  excerpt abstracted the same way, so it names no object of one game; a mistake that warns against
  an action a plan of the same view prescribes is not written (pats.scaffold.validate refuses it).
Plans and patterns come from the outcome card's winning actions (or the contrast card's best rollout),
so the contrast ablation does not silently turn them off.
Removal (mode pats with removal on; never in EXPAND): DELETE the entries of every scope the judge
withdrew (`Assessment.scopes`, judge.removal_threshold: a task's or the type's success average reached
it; such a scope also gets no new entries, in any mode); then, once the judge's warm-up is over
(`Assessment.removal_open`; before it only PRUNE deletes), the entries scoped to a task whose group
all passed (the plan kills the group's variation); the type's most recent non-general entry when the
utility cards show harm: over at least `HARM_MIN_PROBES` probe episodes, probes without the scaffold
won, and more often than scaffolded rollouts by `HARM_MARGIN` (groups where both sides failed are no
evidence either way); in COMPRESS the type's oldest non-general entry, and in PRUNE the oldest
non-general entries until the type is under budget.
Every edit cites at least `min_citations` distinct cards of the type, or is skipped.

Where it departs from (or fixes what is open in) the published method:
- It never UPDATEs or merges; COMPRESS withdraws one entry per review (plus what the evidence marks
  redundant), so a solved type loses its guidance gradually and the judge can turn back to REVISE.
- `general` entries are never deleted by a type's review: other types still see them.
- Plans are never cut here; a view too small for one shows its first steps and says how many it
  left out (pats.scaffold.render). Existing task plans are left as they are.
- Failures of kind `env_error` are the environment's, not the policy's, and make no mistake entry.
- `feedback` is ignored: the rules reviser is correct by construction (it is what the LLM reviser
  falls back to).

Length (over 450 lines, on purpose): the rules reviser's whole decision (what to add, what to
remove, in which mode) in one reading order; how actions are abstracted into patterns is in
abstract.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypeVar

from pats.reviser.abstract import abstract_action, family_pattern, family_vocabulary
from pats.scaffold.plans import key_actions, plan_of
from pats.scaffold.validate import (
    MODE_BUDGETS,
    contradictions,
    counted_skills,
    is_near_duplicate,
    seen_by_type,
    type_entries,
)
from pats.spec.models import ScaffoldBudget, ScaffoldSpec
from pats.types import (
    AddEdit,
    Assessment,
    ContrastData,
    DeleteEdit,
    Edit,
    EvidenceCard,
    ExpertData,
    FailureData,
    FailureMode,
    LLMUsage,
    OutcomeData,
    Record,
    ReviewMode,
    ScaffoldEntry,
    ScopeSuccess,
    UtilityData,
)

EXCERPT_CHARS = 80
GUIDANCE_MODES = (ReviewMode.EXPAND, ReviewMode.REVISE)  # the type is failing: add guidance
REPEAT_COUNT = re.compile(r"\s*\(x\d+\)$")  # the cards' " (x3)" suffix: the lesson is the action
CITE_ORDER = ("outcome", "utility", "contrast", "failure", "expert")  # filler citations, most apt first

HARM_MIN_PROBES = 4  # probe episodes pooled over the type's groups before utility can show harm
HARM_MARGIN = 0.25  # probes' success rate minus the scaffolded rollouts' that counts as harm
WITHDRAWN_LABELS = ("harmful", "stale")  # LLM-judge grades that withdraw an entry (removal on)

MISTAKES = {
    "repeated_action": "Do not repeat '{x}': if an action changed nothing, try a different one.",
    "loop": "Do not cycle through the same actions ({x}); from a state you have seen, try something new.",
    "invalid_action": "Use only actions the game accepts; check the available actions first ({x}).",
    "out_of_turns": "Go straight for the goal: episodes ran out of turns while exploring ({x}).",
    "malformed_output": "Answer with exactly one action in the expected format; this could not be read: {x}.",
}


class RulesReviser:
    """Reviser protocol implementation. `mode_of_scaffold`: grow only adds (mode static builds no
    reviser at all, see pats.build)."""

    @classmethod
    def for_scaffold(cls, sc: ScaffoldSpec) -> RulesReviser:
        """The rules reviser under a run's scaffold settings (every reviewing run's fallback)."""
        assert sc.mode == "grow" or sc.mode == "pats", "only a scaffold that reviews has revisers"
        return cls(
            removal=sc.removes,
            min_citations=sc.min_citations,
            mode_of_scaffold=sc.mode,
            budget=sc.budget,
            task_plans=sc.task_plans,
            plans_per_review=sc.plans_per_review,
        )

    def __init__(
        self,
        removal: bool,
        min_citations: int,
        mode_of_scaffold: Literal["grow", "pats"] = "pats",
        budget: ScaffoldBudget | None = None,
        task_plans: bool = True,
        plans_per_review: int = 0,
    ):
        self.task_plans = task_plans  # false: no task-scoped plans, only guidance that can transfer
        self.plans_per_review = plans_per_review  # plans beside the mode's skill budget
        self.removal = removal
        self.min_citations = min_citations
        self.mode_of_scaffold = mode_of_scaffold
        self.budget = budget

    def usage(self) -> LLMUsage:
        return LLMUsage()

    async def revise(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
        feedback: Sequence[str] = (),
    ) -> list[Edit]:
        t = assessment.task_type
        ev = _Evidence([c for c in cards if c.task_type == t], self.min_citations)
        view = type_entries(entries, t, ev.task_ids)
        mode = ReviewMode(assessment.mode)
        removes = self.removal and self.mode_of_scaffold == "pats"
        withdrawn = {s.scope: s for s in assessment.scopes if s.withdraw} if removes else {}
        edits: list[Edit] = []
        if mode in GUIDANCE_MODES:
            edits += self._guidance(t, mode, ev, view, set(withdrawn), seen_by_type(entries, t))
        if removes and mode is not ReviewMode.EXPAND:  # EXPAND never deletes (scaffold.validate)
            edits += self._removals(assessment, ev, view, withdrawn)
        return edits

    def _guidance(
        self,
        t: str,
        mode: ReviewMode,
        ev: _Evidence,
        view: list[ScaffoldEntry],
        withdrawn: set[str],
        seen: list[ScaffoldEntry],
    ) -> list[AddEdit]:
        max_skills, max_mistakes = MODE_BUDGETS[mode].skills, MODE_BUDGETS[mode].mistakes
        assert max_skills is not None and max_mistakes is not None, "GUIDANCE_MODES count their ADDs"
        planned = {e.scope for e in view if e.kind == "plan"}
        open_tasks = [k for k in ev.task_ids if f"task:{k}" not in planned and not ev.all_passed(k)]
        # Plans from the policy's own successes first (rarest success first), then from expert plans.
        by_success = sorted(open_tasks, key=lambda k: (ev.success_rate(k), k))
        candidates = [self._family_skill(t, ev)]  # the one kind of guidance that reaches new games
        if self.task_plans:
            candidates += [self._success_plan(k, ev) for k in by_success]
            candidates += [self._expert_plan(k, ev) for k in open_tasks]
        mistake = self._mistake(t, ev, view, [c for c in candidates if c is not None], seen)
        if mistake is not None:
            candidates.append(mistake)

        kept: list[AddEdit] = []
        for add in filter(None, candidates):
            if add.scope in withdrawn:
                continue  # the judge withdrew this scope: it gets no new entries while it stays solved
            if add.kind == "mistake":
                over = sum(a.kind == "mistake" for a in kept) >= max_mistakes
            else:  # the validator's count, with the first scaffold.plans_per_review plans beside it
                over = len(counted_skills([*kept, add], self.plans_per_review)) > max_skills
            if over:
                continue
            same_scope = [e.text for e in view if e.scope == add.scope]
            if any(is_near_duplicate(add.text, x) for x in same_scope + [a.text for a in kept]):
                continue  # never re-add what is already there: skip instead
            shown = [(e.id, e.kind, e.scope, e.text) for e in seen] + [
                ("", a.kind, a.scope, a.text) for a in kept
            ]
            if contradictions(add.kind, add.scope, add.text, shown):
                continue  # a view must not warn against what it prescribes; what came first (plans) stays
            kept.append(add)
        return kept

    def _success_plan(self, task_id: str, ev: _Evidence) -> AddEdit | None:
        actions = key_actions(plan_of(ev.winning_actions(task_id)))
        if not actions or ev.all_passed(task_id):
            return None
        cites = ev.cites(task_id, [ev.card(task_id, "contrast"), ev.card(task_id, "outcome")])
        if cites is None:
            return None
        return AddEdit(
            kind="plan", scope=f"task:{task_id}", text="Steps that worked: " + actions, cites=cites
        )

    def _family_skill(self, t: str, ev: _Evidence) -> AddEdit | None:
        """The type's winning pattern with each game's objects replaced by their roles."""
        won = [(k, plan_of(ev.winning_actions(k))) for k in ev.task_ids if ev.winning_actions(k)]
        plans = [(k, plan_of(plan)) for k in ev.task_ids if (plan := ev.expert_plan(k))]
        found = family_pattern(won + plans, ev.vocabulary)
        if found is None:
            return None
        text, shared = found
        tasks = sorted({k for k, _ in won + plans})
        primary = [ev.card(k, kind) for k in tasks for kind in ("outcome", "contrast", "expert")]
        cites = ev.cites(None, primary)
        if cites is None:
            return None
        return AddEdit(
            kind="skill",
            scope=f"type:{t}",
            text=family_skill_text(t, text, shared, len(tasks), won=len(won), plans=len(plans)),
            cites=cites,
        )

    def _expert_plan(self, task_id: str, ev: _Evidence) -> AddEdit | None:
        expert = ev.facts(task_id, ExpertData)
        if expert is None or ev.had_success(task_id):
            return None
        actions = key_actions(plan_of(expert.plan))  # the whole path: a new episode starts at its start
        cites = ev.cites(task_id, [ev.card(task_id, "expert"), ev.card(task_id, "outcome")])
        if not actions or cites is None:
            return None
        return AddEdit(kind="plan", scope=f"task:{task_id}", text="Steps to try: " + actions, cites=cites)

    def _mistake(
        self,
        t: str,
        ev: _Evidence,
        view: list[ScaffoldEntry],
        adds: Sequence[AddEdit] = (),
        seen: Sequence[ScaffoldEntry] = (),
    ) -> AddEdit | None:
        """The dominant failure mode's lesson; a mode whose lesson is in the view already, or warns
        against what an entry the type's prompts show (`seen`) or this review's `adds` prescribe,
        gives way to the next mode."""
        found = {k: ev.facts(k, FailureData) for k in ev.task_ids if not ev.had_success(k)}
        failures = {k: f for k, f in found.items() if f is not None}
        totals: dict[FailureMode, int] = {}
        for failure in failures.values():
            for failure_mode, n in failure.counts.items():
                if failure_mode in MISTAKES and n:
                    totals[failure_mode] = totals.get(failure_mode, 0) + n
        existing = [e.text for e in view if e.scope == f"type:{t}"]
        # The dominant mode first; a mode whose lesson is already in the scaffold gives way to the next.
        for failure_mode in sorted(totals, key=lambda m: (-totals[m], m)):
            showing = [k for k, failure in failures.items() if failure.counts[failure_mode] > 0]
            excerpt = _excerpt(failures[k] for k in showing).get(failure_mode)
            general = abstract_excerpt(failure_mode, excerpt, ev.vocabulary) if excerpt else ""
            text = MISTAKES[failure_mode].format(x=general or failure_mode.replace("_", " "))
            if any(is_near_duplicate(text, x) for x in existing):
                continue
            shown = [(e.id, e.kind, e.scope, e.text) for e in seen] + [
                ("", a.kind, a.scope, a.text) for a in adds
            ]
            if contradictions("mistake", f"type:{t}", text, shown):
                continue
            primary = [ev.card(k, kind) for k in showing for kind in ("failure", "outcome")]
            cites = ev.cites(None, primary)
            if cites is not None:
                return AddEdit(kind="mistake", scope=f"type:{t}", text=text, cites=cites)
        return None

    def _removals(
        self,
        assessment: Assessment,
        ev: _Evidence,
        view: list[ScaffoldEntry],
        withdrawn: dict[str, ScopeSuccess],
    ) -> list[DeleteEdit]:
        mode = ReviewMode(assessment.mode)
        removable = [e for e in view if e.scope != "general" and e.text.strip()]
        out: list[DeleteEdit] = []
        gone: set[str] = set()

        def delete(entry: ScaffoldEntry, reason: str, primary: list, task_id: str | None = None) -> None:
            cites = ev.cites(task_id, primary)
            if entry.id not in gone and cites is not None:
                out.append(DeleteEdit(entry_id=entry.id, reason=reason, cites=cites))
                gone.add(entry.id)

        # The judge's withdrawals (judge.removal_threshold): the scope's own evidence cited.
        for e in removable:
            if (s := withdrawn.get(e.scope)) is not None:
                task_id = e.scope.removeprefix("task:") if e.scope.startswith("task:") else None
                primary = (
                    [ev.card(task_id, "outcome"), ev.card(task_id, "utility")]
                    if task_id
                    else ev.of_type("outcome")
                )
                delete(e, f"{e.scope} success average {s.success:.2f} reached the judge's removal threshold",
                       primary, task_id)  # fmt: skip
        self._evidence_removals(mode, assessment, ev, view, removable, delete, gone)
        return out

    def _evidence_removals(
        self,
        mode: ReviewMode,
        assessment: Assessment,
        ev: _Evidence,
        view: list[ScaffoldEntry],
        removable: list[ScaffoldEntry],
        delete: Callable[..., None],
        gone: set[str],
    ) -> None:
        """All-passed task plans, the LLM judge's grades, harm and COMPRESS; during the judge's
        warm-up (`removal_open` false) only PRUNE's budget deletions."""
        if assessment.removal_open:
            for e in removable:
                task_id = e.scope.removeprefix("task:")
                if e.scope.startswith("task:") and ev.all_passed(task_id):
                    delete(
                        e,
                        "its task's group all passed: the plan only removes variation",
                        [ev.card(task_id, "outcome"), ev.card(task_id, "utility")],
                        task_id,
                    )
            # The LLM judge's grades (judge.kind: llm): an entry it calls harmful or stale is withdrawn,
            # citing the cards the grade cites.
            by_id = {c.id: c for c in ev.cards}
            for v in assessment.verdicts:
                graded = next((e for e in removable if e.id == v.entry_id), None)
                if graded is not None and v.label in WITHDRAWN_LABELS:
                    of_task = graded.scope.removeprefix("task:") if graded.scope.startswith("task:") else None
                    why = f"the judge graded it {v.label}" + (f": {v.reason}" if v.reason else "")
                    delete(graded, why, [by_id.get(c) for c in v.cites], of_task)
            utility = ev.of_type("utility")
            if shows_harm(utility):
                left = [e for e in removable if e.id not in gone]
                newest = sorted(left, key=lambda e: (e.updated_step, e.created_step, e.id))
                if newest:
                    delete(
                        newest[-1],
                        "probes without the scaffold won more often than scaffolded rollouts",
                        list(utility),
                    )

        oldest = sorted((e for e in removable if e.id not in gone), key=lambda e: (e.created_step, e.id))
        if mode is ReviewMode.COMPRESS and assessment.removal_open and not gone and oldest:
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


def family_skill_text(task_type: str, pattern: str, shared: int, tasks: int, *, won: int, plans: int) -> str:
    """A family pattern as guidance: the roles are named so the policy reads them as placeholders. The
    label counts what the pattern came from, the policy's `won` episodes apart from expert `plans`,
    and says "won" only when every trajectory was a win."""
    sources = [
        f"{n} {what}{'s' * (n != 1)}" for n, what in ((won, "won episode"), (plans, "expert plan")) if n
    ]
    head = f"How {task_type} games were won" if not plans else f"How to finish {task_type} games"
    return (
        f"{head} (the pattern of {shared} of {tasks} games, from {' and '.join(sources)}; <object> and <place> "
        f"stand for this game's own): {pattern}"
    )


def abstract_excerpt(failure_mode: str, excerpt: str, vocabulary: frozenset[str]) -> str:
    """A failure excerpt without one game's objects: its actions abstracted, observations dropped."""
    if failure_mode == "loop":
        return " | ".join(abstract_action(a, vocabulary) for a in excerpt.split(" | "))
    if failure_mode in ("repeated_action", "invalid_action"):
        return abstract_action(excerpt.split(" -> ")[0], vocabulary)
    if failure_mode == "out_of_turns":
        return excerpt.split(",")[0]  # "stopped after 10 turns"; the last action is one game's
    return ""  # malformed output: the policy's text, not an action; the template says enough


def shows_harm(utility: Sequence[EvidenceCard]) -> bool:
    """Pooled over the type's utility cards: enough probe episodes, some probe wins, and probes ahead
    of the scaffolded rollouts by HARM_MARGIN. Groups where both sides failed are no evidence."""
    facts = [c.data for c in utility if isinstance(c.data, UtilityData)]
    n_with = sum(u.n_with for u in facts)
    n_without = sum(u.n_without for u in facts)
    if n_without < HARM_MIN_PROBES or n_with == 0:
        return False
    won_with = sum(u.success_with * u.n_with for u in facts)
    won_without = sum(u.success_without * u.n_without for u in facts)
    return won_without > 0 and won_without / n_without - won_with / n_with >= HARM_MARGIN


def _under_budget(entries: Sequence[ScaffoldEntry], budget: ScaffoldBudget) -> bool:
    """Under budget is what stops the judge asking for PRUNE: both ratios below 1."""
    return len(entries) < budget.max_entries and sum(e.tokens for e in entries) < budget.max_tokens


def _excerpt(failures: Iterable[FailureData]) -> dict[str, str]:
    """The first excerpt per failure mode, on one line, without its repeat count, cut to EXCERPT_CHARS."""
    out: dict[str, str] = {}
    for failure in failures:
        for ex in failure.examples:
            text = REPEAT_COUNT.sub("", " ".join(ex.excerpt.split()))
            if text and ex.mode not in out:
                out[ex.mode] = text[:EXCERPT_CHARS]
    return out


Facts = TypeVar("Facts", bound=Record)  # one of the card facts records: OutcomeData, ...


class _Evidence:
    """One type's cards, indexed by task and card type, and the citation rule."""

    def __init__(self, cards: Sequence[EvidenceCard], min_citations: int):
        self.cards = list(cards)
        self.min_citations = min_citations
        self.by_task: dict[str, dict[str, EvidenceCard]] = {}
        for c in self.cards:
            self.by_task.setdefault(c.task_id, {}).setdefault(c.type, c)
        self.task_ids = sorted(self.by_task)
        # The family's vocabulary: arguments seen in the actions of two or more of the type's tasks.
        seen: list[tuple[str, tuple[str, ...]]] = []
        for c in self.cards:
            if isinstance(c.data, ContrastData):
                seen += [(c.task_id, c.data.best.actions), (c.task_id, c.data.worst.actions)]
            elif isinstance(c.data, OutcomeData):
                seen.append((c.task_id, c.data.winning_actions))
            elif isinstance(c.data, ExpertData):
                seen.append((c.task_id, c.data.plan))
        self.vocabulary = family_vocabulary(seen)

    def card(self, task_id: str, card_type: str) -> EvidenceCard | None:
        return self.by_task.get(task_id, {}).get(card_type)

    def facts(self, task_id: str, kind: type[Facts]) -> Facts | None:
        """The facts of the task's card of that kind (`OutcomeData`, ...); None when it has none."""
        for card in self.by_task.get(task_id, {}).values():
            if isinstance(card.data, kind):
                return card.data
        return None

    def of_type(self, card_type: str) -> list[EvidenceCard]:
        return [c for c in self.cards if c.type == card_type]

    def success_rate(self, task_id: str) -> float:
        outcome = self.facts(task_id, OutcomeData)
        return outcome.success_rate if outcome is not None else 0.0

    def all_passed(self, task_id: str) -> bool:
        outcome = self.facts(task_id, OutcomeData)
        return outcome is not None and outcome.all_passed

    def winning_actions(self, task_id: str) -> tuple[str, ...]:
        """The actions of a rollout that won: the outcome card's, else the contrast card's best."""
        outcome = self.facts(task_id, OutcomeData)
        if outcome is not None and outcome.winning_actions:
            return outcome.winning_actions
        contrast = self.facts(task_id, ContrastData)
        return contrast.best.actions if contrast is not None and contrast.best.success else ()

    def expert_plan(self, task_id: str) -> tuple[str, ...]:
        expert = self.facts(task_id, ExpertData)
        return expert.plan if expert is not None else ()

    def had_success(self, task_id: str) -> bool:
        contrast = self.facts(task_id, ContrastData)
        return self.success_rate(task_id) > 0 or (contrast is not None and contrast.best.success)

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
