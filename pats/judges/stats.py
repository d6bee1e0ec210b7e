"""The statistics judge: picks a review mode per task type from success and scaffold size alone.

Per task type it keeps an exponential moving average of group success (the first group sets it, then
`ema = alpha * x + (1 - alpha) * ema`, once per group in the order given) and a budget pressure
`max(entries / max_entries, tokens / max_tokens)`. Mode: PRUNE if pressure >= 1, else COMPRESS if
ema >= compress_threshold, else REVISE if ema >= revise_threshold, else EXPAND.

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

from pats.reviser.validate import type_entries
from pats.spec.models import LLMJudgeSpec, ScaffoldBudget, StatsJudgeSpec
from pats.types import (
    Assessment,
    EvidenceCard,
    LLMUsage,
    ReviewMode,
    RolloutGroup,
    ScaffoldEntry,
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
    """Judge protocol implementation; its only state is the per-type success EMA."""

    def __init__(self, spec: StatsJudgeSpec | LLMJudgeSpec, budget: ScaffoldBudget):
        self.alpha = spec.ema_alpha
        self.compress_threshold = spec.compress_threshold
        self.revise_threshold = spec.revise_threshold
        self.budget = budget
        self.ema: dict[str, float] = {}

    def usage(self) -> LLMUsage:
        return LLMUsage()

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
                self.ema[group.task.type] = update_ema(self.ema.get(group.task.type), x, self.alpha)

        out = []
        for task_type in sorted(task_ids):
            ema = self.ema.get(task_type, 0.0)  # only empty groups so far: treat as failing
            pressure = budget_pressure(type_entries(entries, task_type, task_ids[task_type]), self.budget)
            out.append(
                Assessment(
                    task_type=task_type,
                    mode=pick_mode(ema, pressure, self.compress_threshold, self.revise_threshold),
                    ema_success=ema,
                    pressure=pressure,
                    utility=mean_utility(cards, task_type),
                )
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"ema": dict(sorted(self.ema.items()))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ema = state.get("ema") if isinstance(state, dict) else None
        if not isinstance(ema, dict) or not all(isinstance(v, (int, float)) for v in ema.values()):
            raise ValueError(
                "StatsJudge state must look like {'ema': {<task type>: <float>}}, as state_dict() returns"
            )
        self.ema = {str(k): float(v) for k, v in ema.items()}


def mean_utility(cards: Sequence[EvidenceCard], task_type: str) -> float | None:
    """Mean with-minus-without success delta over the type's utility cards; None without any."""
    deltas = [c.data.delta for c in cards if c.task_type == task_type and isinstance(c.data, UtilityData)]
    return sum(deltas) / len(deltas) if deltas else None
