"""The scaffold policy: which view each rollout group sees, and the review after each step.

Modes are resolved once, when `build_scaffold_policy` composes a `ScaffoldPolicy`, never inside the
loop: no store (mode none, plain GRPO: the empty view, nothing reviewed); a store without a reviewer
(mode static: the initial bank, never edited); a store and a `Reviewer` (modes grow and pats: cards ->
judge -> reviser -> validated edits; grow accepts ADD edits only).

A review never blocks training on a failing reviser: an invalid edit set is retried once with the
validation errors as feedback, then the rules reviser answers instead (logged as a fallback); a set
that still fails is refused and the scaffold stays as it was for that task type. A reviser that the rules
had to replace for every task type FALLBACK_STREAK_WARNING steps in a row is announced once on stderr
(and `fallback_streak` counts such steps for the metrics): it is misconfigured or unfit, and training
without it should not pass unnoticed. Each type's set is
checked with the scaffold's one edit validator (`pats.scaffold.validate.validate_edits`), whose rules
include every rule of `ScaffoldStore.apply`, so nothing the store would refuse leaves the review.

`commit` ends a step's scaffold side the same way for both trainers (the local engine and verl's
scaffold service): the review's edits become the next version, or, should the store refuse them, the
scaffold stays as it was and the refusal is logged; the step's review and scaffold metrics come with it.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from pats.cards import build_cards
from pats.errors import JudgeError
from pats.metrics import review_metrics, scaffold_metrics
from pats.protocols import GroupPlan, Judge, RefiningReviser, Reviser, TokenCounter
from pats.scaffold import EditError, ScaffoldStore
from pats.scaffold.validate import validate_edits
from pats.spec.models import ScaffoldSpec
from pats.types import (
    EMPTY_VIEW,
    AddEdit,
    Assessment,
    Edit,
    EvidenceCard,
    JudgeState,
    LLMUsage,
    ReviewResult,
    RolloutGroup,
    ScaffoldEntry,
    ScaffoldVersion,
    ScaffoldView,
    Task,
)

T = TypeVar("T")

# Steps in a row in which the rules reviser answered every task type before the run says so: one such
# step can be one bad answer or a slow server, three in a row is a reviser that is not working.
FALLBACK_STREAK_WARNING = 3


@dataclass(frozen=True)
class Committed:
    """A step's scaffold side, finished: the review as applied, the new version (None when nothing
    changed), and the step's review and scaffold metrics."""

    result: ReviewResult
    version: ScaffoldVersion | None
    metrics: dict[str, float]


@dataclass(frozen=True)
class TypeRevision:
    """One task type's part of a review: its validated edits, the notes of refused sets, whether the
    rules reviser answered in the LLM reviser's place, and reviser calls cut off by the budget."""

    edits: tuple[Edit, ...] = ()
    refused: tuple[str, ...] = ()
    fallback: bool = False
    over_budget: int = 0


class ScaffoldPolicy:
    """Which view each rollout group sees, the review after each step, and the step's end: one class
    for every mode, composed of parts chosen once from the spec (pats.build):
    - no store: mode none (plain GRPO), every group sees the empty view, nothing is reviewed;
    - a store, no reviewer: mode static, views from the initial bank, never edited;
    - a store and a `Reviewer`: modes grow and pats."""

    def __init__(self, mode: str, store: ScaffoldStore | None = None, reviewer: Reviewer | None = None):
        self.mode, self.store, self.reviewer = mode, store, reviewer

    def view(self, task: Task) -> ScaffoldView:
        return self.store.pin(task) if self.store is not None else EMPTY_VIEW

    def view_entries(self, group: RolloutGroup) -> tuple[ScaffoldEntry, ...]:
        """The entries of the view `group` was pinned (by its version's hash), in the view's order; ()
        for the empty view. For the coverage metrics (pats.metrics.group_metrics), at the step's end."""
        if self.store is None or not group.scaffold_version:
            return ()
        entries = {e.id: e for e in self.store.version(group.scaffold_version).entries}
        return tuple(entries[i] for i in self.store.pin(group.task, group.scaffold_version).entry_ids)

    def plan(self, tasks: Sequence[Task], group_size: int, probes: int) -> list[GroupPlan]:
        """One pin per task per step: every scaffolded rollout of the group sees this one version."""
        if self.store is None:
            return [GroupPlan(task=t, view=EMPTY_VIEW, size=group_size, probes=0) for t in tasks]
        return [GroupPlan(task=t, view=self.store.pin(t), size=group_size, probes=probes) for t in tasks]

    async def review(self, step: int, groups: Sequence[RolloutGroup]) -> ReviewResult:
        if self.reviewer is None:
            return ReviewResult(step=step, cards=(), assessments=(), edits=())
        return await self.reviewer.review(step, groups)

    def apply(self, result: ReviewResult, step: int) -> ScaffoldVersion | None:
        if self.store is None or self.reviewer is None or not result.edits:
            return None
        return self.store.apply(result.edits, step)

    def commit(self, result: ReviewResult, step: int) -> Committed:
        """The review's edits as the next version. A set the store refuses (the review checks the same
        rules first, so this is a bug, not a bad answer) is dropped and logged as refused
        (`review/store_refused`), and training goes on with the current version."""
        try:
            version, refused = self.apply(result, step), 0.0
        except EditError as err:
            note = "the store refused the step's edit set, the scaffold stays as it was: " + "; ".join(
                err.problems
            )
            result = result.model_copy(update={"edits": (), "refused": (*result.refused, note)})
            version, refused = None, 1.0
        metrics = {
            **review_metrics(result),
            "review/store_refused": refused,
            **scaffold_metrics(self.store.current if self.store else None),
        }
        return Committed(result, version, metrics)

    def judge_state(self) -> JudgeState:
        """What a resume restores beside the store's versions: the judge's state, where there is one."""
        return JudgeState(self.reviewer.judge.state_dict() if self.reviewer is not None else {})

    def load_judge_state(self, state: JudgeState) -> None:
        if self.reviewer is not None:
            self.reviewer.judge.load_state_dict(copy.deepcopy(state.root))


class Reviewer:
    """cards -> judge -> reviser -> validated edits, for modes grow (ADD only) and pats."""

    def __init__(
        self,
        store: ScaffoldStore,
        spec: ScaffoldSpec,
        judge: Judge,
        reviser: Reviser,
        fallback: Reviser,
        count_tokens: TokenCounter,
        expert_plan: Callable[[Task], Sequence[str] | None] | None = None,
    ):
        self.store, self.mode = store, spec.mode
        self.spec, self.judge, self.reviser, self.fallback = spec, judge, reviser, fallback
        self.count_tokens, self.expert_plan = count_tokens, expert_plan
        self.fallback_streak = 0  # steps in a row in which the rules reviser answered every task type
        # A reviser that checks and re-asks itself (the LLM reviser's program) is asked once per type;
        # any other is retried here once with the problems.
        self.refines = isinstance(reviser, RefiningReviser) and reviser.check is not None

    def _cards(self, groups: Sequence[RolloutGroup]) -> list[EvidenceCard]:
        cards: list[EvidenceCard] = []
        for group in groups:
            plan = None
            if "expert" in self.spec.cards and self.expert_plan is not None:
                plan = self.expert_plan(group.task)
            cards += build_cards(
                group, self.spec.cards, self.count_tokens, self.spec.budget.card_tokens, expert_plan=plan
            )
        return cards

    async def review(self, step: int, groups: Sequence[RolloutGroup]) -> ReviewResult:
        start = time.perf_counter()
        # One budget for the step's LLM work: the judge grades within it (an LLM judge drops its grades
        # past it, see LLMJudge.budget_s) and each reviser call gets what is left, then rules answer.
        deadline = time.monotonic() + self.spec.review_budget_s
        before = self._usage()
        cards = await asyncio.to_thread(self._cards, groups)  # tokenizer work, off the event loop
        entries = self.store.current.entries
        assessments = await self.judge.assess(step, groups, cards, entries)
        outcomes = await asyncio.gather(*(self._revise_type(step, a, cards, deadline) for a in assessments))
        edits: list[Edit] = []
        touched: set[str] = set()
        refused: list[str] = []
        fallback = False
        over_budget = 0  # reviser calls this review cut off (the judge counts its own)
        for outcome in outcomes:
            over_budget += outcome.over_budget
            for edit in outcome.edits:
                if isinstance(edit, AddEdit):
                    edits.append(edit)
                    continue
                if edit.entry_id in touched:
                    # Two task types edited one shared (general) entry: the first wins, so the merged
                    # set still edits each entry once, as the store requires.
                    continue
                touched.add(edit.entry_id)
                edits.append(edit)
            refused += outcome.refused
            fallback |= outcome.fallback
        if outcomes:  # a step without task types asked no reviser: it neither extends nor ends a streak
            replaced = all(outcome.fallback for outcome in outcomes)
            self.fallback_streak = self.fallback_streak + 1 if replaced else 0
            if self.fallback_streak == FALLBACK_STREAK_WARNING:
                _announce_streak(step, refused)
        used = self._usage() - before
        return ReviewResult(
            step=step,
            cards=tuple(cards),
            assessments=tuple(assessments),
            edits=tuple(edits),
            refused=tuple(refused),
            fallback=fallback,
            fallback_streak=self.fallback_streak,
            llm_faults=used.faults,
            llm_calls=used.calls,
            llm_seconds=used.seconds,
            llm_tokens=used.tokens,
            llm_malformed=used.malformed,
            llm_timeouts=used.timeouts,
            over_budget=over_budget + used.over_budget,
            seconds=time.perf_counter() - start,
        )

    async def _revise_type(
        self, step: int, assessment: Assessment, cards: Sequence[EvidenceCard], deadline: float
    ) -> TypeRevision:
        entries = self.store.entries_for_type(assessment.task_type)
        if self.refines:
            return await self._refined(step, assessment, cards, entries, deadline)
        refused: list[str] = []
        feedback: list[str] = []
        over = 0
        for attempt in range(2):
            asked = self.reviser.revise(step, assessment, cards, entries, feedback=feedback)
            edits, failed, over = await self._ask(asked, assessment.task_type, deadline)
            if failed:
                refused.append(failed)
                break
            errors = self._check(edits, assessment, entries, cards)
            if not errors:
                return TypeRevision(tuple(edits), tuple(refused), False, over)
            refused.append(f"{assessment.task_type} attempt {attempt + 1}: " + "; ".join(errors))
            feedback = errors
        return await self._fall_back(step, assessment, cards, entries, refused, over)

    async def _refined(
        self, step: int, assessment: Assessment, cards: Sequence[EvidenceCard], entries, deadline: float
    ) -> TypeRevision:
        """A reviser whose program checks its answers with the review's check and asks again itself
        (the LLM reviser): one program run, each refused answer logged as an attempt, then the rules."""
        assert isinstance(self.reviser, RefiningReviser)
        asked = self.reviser.refine(step, assessment, cards, entries)
        refinement, failed, over = await self._ask(asked, assessment.task_type, deadline)
        if failed:
            return await self._fall_back(step, assessment, cards, entries, [failed], over)
        refused = [
            f"{assessment.task_type} attempt {n + 1}: " + "; ".join(attempt.problems)
            for n, attempt in enumerate(refinement.attempts)
            if attempt.problems
        ]
        if refinement.accepted:
            return TypeRevision(refinement.edits, tuple(refused), False, 0)
        return await self._fall_back(step, assessment, cards, entries, refused, 0)

    async def _ask(self, asked: Awaitable[T], task_type: str, deadline: float) -> tuple[T, str, int]:
        """The reviser's answer within the step's budget, or (None, why it failed, 1 if the budget cut
        it off else 0)."""
        try:
            return await asyncio.wait_for(asked, max(0.0, deadline - time.monotonic())), "", 0
        except JudgeError as err:
            return cast(T, None), f"{task_type}: reviser failed: {err}", 0
        except asyncio.TimeoutError:  # the builtin TimeoutError from 3.11 on
            why = (
                f"{task_type}: reviser stopped at the step's review budget "
                f"(scaffold.review_budget_s={self.spec.review_budget_s:g})"
            )
            return cast(T, None), why, 1

    async def _fall_back(
        self, step: int, assessment: Assessment, cards, entries, refused: list[str], over: int
    ) -> TypeRevision:
        """The rules reviser's answer in place of a refused or failed one (none where it was the rules
        that were refused)."""
        if self.reviser is self.fallback:
            return TypeRevision((), tuple(refused), False, over)
        edits = await self.fallback.revise(step, assessment, cards, entries)
        errors = self._check(edits, assessment, entries, cards)
        if errors:
            refused.append(f"{assessment.task_type} fallback: " + "; ".join(errors))
            return TypeRevision((), tuple(refused), True, over)
        return TypeRevision(tuple(edits), tuple(refused), True, over)

    def _check(self, edits, assessment: Assessment, entries, cards) -> list[str]:
        return check_edits(self.spec, edits, assessment, entries, cards, self.count_tokens)

    def _usage(self) -> LLMUsage:
        """The judge's and the reviser's LLM work so far (the fallback rules reviser calls none)."""
        return self.judge.usage() + self.reviser.usage()


def check_edits(
    spec: ScaffoldSpec,
    edits: Sequence[Edit],
    assessment: Assessment,
    entries: Sequence[ScaffoldEntry],
    cards: Sequence[EvidenceCard],
    count_tokens: TokenCounter,
) -> list[str]:
    """The review's check of one task type's edit set under the run's scaffold settings (empty: it is
    accepted); pats/reviser/score.py scores reviser answers with it."""
    return validate_edits(
        edits,
        assessment.mode,
        entries,
        cards,
        count_tokens,
        removal=spec.removes,
        min_citations=spec.min_citations,
        task_type=assessment.task_type,
        task_plans=spec.task_plans,
        add_only=spec.mode == "grow",  # a bank that only grows (SkillRL-like)
        plans_per_review=spec.plans_per_review,
    )


def _announce_streak(step: int, refused: Sequence[str]) -> None:
    why = f" First problem of step {step}: {refused[0][:300]}." if refused else ""
    print(
        f"warning: step {step}: the LLM reviser has failed {FALLBACK_STREAK_WARNING} steps in a row; the "
        f"rules reviser answered every task type in its place.{why} Training goes on; check reviser.llm "
        "(model, api_base, api_key_env) and the metrics review/llm_faults, review/fallback_streak.",
        file=sys.stderr,
        flush=True,
    )
