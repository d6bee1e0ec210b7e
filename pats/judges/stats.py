"""The statistics judge: picks a review mode per task type from success and scaffold size alone.

Per task type, and per task for task-scoped entries, it keeps an exponential moving average of group
success (`ema = alpha * x + (1 - alpha) * ema`, once per group in the order given; the first group
sets it, or every average starts at `ema_start`) and a budget pressure
`max(entries / max_entries, tokens / max_tokens)`. Mode: PRUNE if pressure >= 1, else COMPRESS if
ema >= compress_threshold, else REVISE if ema >= revise_threshold, else EXPAND.

Removal that can act gradually (all off by default, so shipped specs compute what they did):
- `removal_warmup`: a type's first N reviews allow no removal but PRUNE's (`Assessment.removal_open`);
- `removal_threshold`: a scope whose average is at or above it is marked withdrawn
  (`Assessment.scopes`): `task:<id>` by that task's average, `type:<t>` by the type's; the reviser
  deletes its entries and adds none there. The small-scale PATS reproduction: start 0, warm-up 4,
  threshold 0.25 (notes/anchors.md).
Each assessment says why in `reason`, and it goes to the event log with the averages.

Where it departs from the published method, or fixes what the paper leaves open:
- A group's success rate counts its scaffolded rollouts only (probes measure the scaffold, they are
  not the policy-with-scaffold the modes are about); a group made only of probes counts them all.
- Pressure counts the entries a prompt of that type can see: `general`, `type:<t>`, and `task:<id>` for
  the task ids of this step's groups of that type (plans of tasks not played this step do not press).
  Token counts are the entries' stored `tokens` (already counted with the policy tokenizer).
- It grades no entries (verdicts stay empty); the LLM judge does that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pats.scaffold.validate import type_entries
from pats.spec.models import LLMJudgeSpec, ScaffoldBudget, StatsJudgeSpec
from pats.types import (
    Assessment,
    EvidenceCard,
    LLMUsage,
    ReviewMode,
    RolloutGroup,
    ScaffoldEntry,
    ScopeSuccess,
    UtilityData,
)


def update_ema(prev: float | None, x: float, alpha: float) -> float:
    """The next moving average; the first observation (prev None) initializes it to x."""
    if prev is None:
        return x
    return alpha * x + (1.0 - alpha) * prev


def pick_mode(ema: float, pressure: float, compress: float, revise: float) -> ReviewMode:
    """Review mode from the success average and the budget pressure (thresholds inclusive)."""
    if pressure >= 1.0:
        return ReviewMode.PRUNE
    if ema >= compress:
        return ReviewMode.COMPRESS
    if ema >= revise:
        return ReviewMode.REVISE
    return ReviewMode.EXPAND


def budget_pressure(entries: Sequence[ScaffoldEntry], budget: ScaffoldBudget) -> float:
    """max(entries / max_entries, tokens / max_tokens) over the entries given."""
    tokens = sum(e.tokens for e in entries)
    return max(len(entries) / budget.max_entries, tokens / budget.max_tokens)


def group_success(group: RolloutGroup) -> float | None:
    """Success rate of the group's scaffolded rollouts (all rollouts if it has none); None if empty."""
    rollouts = group.scaffolded or group.rollouts
    if not rollouts:
        return None
    return sum(r.success for r in rollouts) / len(rollouts)


class StatsJudge:
    """Judge protocol implementation. Its state, a plain serializable dict owned here: the success
    averages per type (`ema`) and per task (`task_ema`), and the reviews per type (`reviews`)."""

    def __init__(self, spec: StatsJudgeSpec | LLMJudgeSpec, budget: ScaffoldBudget):
        self.spec = spec
        self.alpha = spec.ema_alpha
        self.compress_threshold = spec.compress_threshold
        self.revise_threshold = spec.revise_threshold
        self.budget = budget
        self.ema: dict[str, float] = {}
        self.task_ema: dict[str, float] = {}
        self.reviews: dict[str, int] = {}

    def usage(self) -> LLMUsage:
        return LLMUsage()

    def _update(self, averages: dict[str, float], key: str, x: float) -> None:
        prev = averages.get(key, self.spec.ema_start)
        averages[key] = update_ema(prev, x, self.alpha)

    async def assess(
        self,
        step: int,
        groups: Sequence[RolloutGroup],
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
    ) -> list[Assessment]:
        task_ids: dict[str, set[str]] = {}
        for group in groups:  # in order: the EMA is order-dependent
            task_ids.setdefault(group.task.type, set()).add(group.task.id)
            x = group_success(group)
            if x is not None:
                self._update(self.ema, group.task.type, x)
                self._update(self.task_ema, group.task.id, x)

        out = []
        for task_type in sorted(task_ids):
            self.reviews[task_type] = self.reviews.get(task_type, 0) + 1
            ema = self.ema.get(task_type, 0.0)  # only empty groups so far: treat as failing
            pressure = budget_pressure(type_entries(entries, task_type, task_ids[task_type]), self.budget)
            mode = pick_mode(ema, pressure, self.compress_threshold, self.revise_threshold)
            scopes = self._scopes(task_type, sorted(task_ids[task_type]))
            out.append(
                Assessment(
                    task_type=task_type,
                    mode=mode,
                    ema_success=ema,
                    pressure=pressure,
                    utility=mean_utility(cards, task_type),
                    reviews=self.reviews[task_type],
                    removal_open=self._open(task_type),
                    scopes=scopes,
                    reason=self._reason(task_type, mode, ema, pressure, scopes),
                )
            )
        return out

    def _open(self, task_type: str) -> bool:
        """Past the warm-up: this type has had more reviews than `removal_warmup`."""
        return self.reviews.get(task_type, 0) > self.spec.removal_warmup

    def _scopes(self, task_type: str, tasks: list[str]) -> tuple[ScopeSuccess, ...]:
        threshold, open_ = self.spec.removal_threshold, self._open(task_type)
        averages = [(f"type:{task_type}", self.ema.get(task_type))]
        averages += [(f"task:{t}", self.task_ema.get(t)) for t in tasks]
        return tuple(
            ScopeSuccess(scope=scope, success=x, withdraw=threshold is not None and open_ and x >= threshold)
            for scope, x in averages
            if x is not None
        )

    def _reason(self, task_type: str, mode: ReviewMode, ema: float, pressure: float, scopes) -> str:
        if mode is ReviewMode.PRUNE:
            why = f"PRUNE: budget pressure {pressure:.2f} >= 1"
        else:
            bounds = {ReviewMode.COMPRESS: f">= compress_threshold {self.compress_threshold}",
                      ReviewMode.REVISE: f"in [revise_threshold {self.revise_threshold}, compress_threshold "
                                         f"{self.compress_threshold})",
                      ReviewMode.EXPAND: f"< revise_threshold {self.revise_threshold}"}  # fmt: skip
            why = f"{mode.value}: success average {ema:.3f} {bounds[mode]}"
        if not self._open(task_type):
            why += f"; warm-up, review {self.reviews[task_type]} of {self.spec.removal_warmup}: no removal but PRUNE"
        withdrawn = [f"{s.scope} ({s.success:.3f})" for s in scopes if s.withdraw]
        if withdrawn:
            why += f"; withdrawn at removal_threshold {self.spec.removal_threshold}: {', '.join(withdrawn)}"
        return why

    def state_dict(self) -> dict[str, Any]:
        return {
            "ema": dict(sorted(self.ema.items())),
            "task_ema": dict(sorted(self.task_ema.items())),
            "reviews": dict(sorted(self.reviews.items())),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The state of state_dict(); one written before per-task averages existed ({'ema': ...}
        alone) loads with none of them (they start again)."""
        parts = (
            {k: state.get(k, {}) for k in ("ema", "task_ema", "reviews")} if isinstance(state, dict) else {}
        )
        if (
            not isinstance(state, dict)
            or not isinstance(state.get("ema"), dict)
            or not all(isinstance(p, dict) for p in parts.values())
            or not all(isinstance(v, (int, float)) for p in parts.values() for v in p.values())
        ):
            raise ValueError(
                "StatsJudge state must look like {'ema': {<task type>: <float>}, 'task_ema': {<task id>: "
                "<float>}, 'reviews': {<task type>: <int>}}, as state_dict() returns"
            )
        self.ema = {str(k): float(v) for k, v in parts["ema"].items()}
        self.task_ema = {str(k): float(v) for k, v in parts["task_ema"].items()}
        self.reviews = {str(k): int(v) for k, v in parts["reviews"].items()}


def mean_utility(cards: Sequence[EvidenceCard], task_type: str) -> float | None:
    """Mean with-minus-without success delta over the type's utility cards; None without any."""
    deltas = [c.data.delta for c in cards if c.task_type == task_type and isinstance(c.data, UtilityData)]
    return sum(deltas) / len(deltas) if deltas else None
