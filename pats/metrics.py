"""Per-step metrics from rollout groups, the review and the scaffold (DESIGN.md "Metrics").

Guidance coverage (`coverage_metrics`, part of `group_metrics`): each rollout group is counted by what
its pinned view showed its scaffolded rollouts (`Shown`): `plan`, a plan entry of its own task; `other`,
entries but no plan of its task (type and general entries, an LLM reviser's task skills); `none`, the
empty view (every group of a run without a scaffold). Per class: its groups (`coverage/<class>_groups`,
`coverage/<class>_fraction` of the step's), the informative fraction among them, and train success of
their scaffolded rollouts and of their probes (`coverage/<class>_success_with_scaffold`,
`..._without_scaffold`); a class without groups, or without rollouts of a kind, has no such line, so a
mean over steps is never pulled down by a zero that was not measured. `coverage/plan_steps`: the steps
of the task plans shown, per group shown a plan (mean); `coverage/plan_cut_groups`: groups shown a plan
that says it was cut (pats.scaffold.render.plan_steps' `more`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal, get_args

from pats.types import ReviewResult, Rollout, RolloutGroup, ScaffoldEntry, ScaffoldVersion, Task

Coverage = Literal["plan", "other", "none"]
COVERAGE: tuple[Coverage, ...] = get_args(Coverage)


@dataclass(frozen=True)
class Shown:
    """What one rollout group's pinned view showed its scaffolded rollouts, as the coverage metrics count it."""

    coverage: Coverage
    plan_steps: int  # steps of the task's plan entries in the view (a plan not read as steps counts 1)
    plan_cut: bool  # one of those plans says it was cut to fit


def coverage_of(task: Task, entries: Sequence[ScaffoldEntry]) -> Shown:
    """`entries` (those of a group's pinned view) as the coverage metrics count them for `task`."""
    from pats.scaffold.render import plan_steps

    plans = [plan_steps(e.text) for e in entries if e.kind == "plan" and e.scope == f"task:{task.id}"]
    if not plans:
        return Shown("other" if entries else "none", 0, False)
    steps = sum(len(p.steps) if p is not None else 1 for p in plans)
    return Shown("plan", steps, any(p is not None and p.more for p in plans))


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0


def rollout_metrics(rollouts: Sequence[Rollout], prefix: str) -> dict[str, float]:
    if not rollouts:
        return {}
    return {
        f"{prefix}/success": _mean([float(r.success) for r in rollouts]),
        f"{prefix}/reward": _mean([r.reward for r in rollouts]),
        f"{prefix}/turns": _mean([len(r.turns) for r in rollouts]),
        f"{prefix}/prompt_tokens": _mean([r.prompt_tokens for r in rollouts]),
        f"{prefix}/errors": float(sum(bool(r.error) for r in rollouts)),
    }


def task_outcomes(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """Task id -> its episodes' successes (1.0 or 0.0), in play order: an evaluation's outcomes by game."""
    out: dict[str, list[float]] = {}
    for r in rollouts:
        out.setdefault(r.task_id, []).append(float(r.success))
    return out


def group_metrics(
    groups: Sequence[RolloutGroup], view_entries: Callable[[RolloutGroup], Sequence[ScaffoldEntry]]
) -> dict[str, float]:
    """The step's groups: informative fraction, success and the rest over all rollouts, with and
    without the scaffold, and the guidance coverage (`view_entries`: the entries of a group's pinned
    view, `ScaffoldPolicy.view_entries`)."""
    scaffolded = [r for g in groups for r in g.scaffolded]
    probes = [r for g in groups for r in g.probes]
    out = {
        "train/informative_fraction": _mean([float(g.informative) for g in groups]),
        "train/informative_groups": float(sum(g.informative for g in groups)),
        "train/groups": float(len(groups)),
        **rollout_metrics([r for g in groups for r in g.rollouts], "train"),
    }
    if any(g.scaffold_version for g in groups):  # with no scaffold (mode none) there is no split to report
        out |= rollout_metrics(scaffolded, "train_with_scaffold")
        out |= rollout_metrics(probes, "train_without_scaffold")
    return out | coverage_metrics(groups, [coverage_of(g.task, view_entries(g)) for g in groups])


def coverage_metrics(groups: Sequence[RolloutGroup], seen: Sequence[Shown]) -> dict[str, float]:
    """The guidance coverage of the step's groups, `seen[i]` what group i was shown (module docstring)."""
    out: dict[str, float] = {}
    for kind in COVERAGE:
        mine = [g for g, s in zip(groups, seen, strict=True) if s.coverage == kind]
        out[f"coverage/{kind}_groups"] = float(len(mine))
        out[f"coverage/{kind}_fraction"] = len(mine) / len(groups) if groups else 0.0
        if not mine:
            continue
        out[f"coverage/{kind}_informative_fraction"] = _mean([float(g.informative) for g in mine])
        for name, rollouts in (("with", [r for g in mine for r in g.scaffolded]),
                               ("without", [r for g in mine for r in g.probes])):  # fmt: skip
            if rollouts:
                out[f"coverage/{kind}_success_{name}_scaffold"] = _mean([float(r.success) for r in rollouts])
    plans = [s for s in seen if s.coverage == "plan"]
    if plans:
        out["coverage/plan_steps"] = _mean([float(s.plan_steps) for s in plans])
    out["coverage/plan_cut_groups"] = float(sum(s.plan_cut for s in plans))
    return out


def scaffold_metrics(version: ScaffoldVersion | None) -> dict[str, float]:
    if version is None:
        return {"scaffold/entries": 0.0, "scaffold/tokens": 0.0}
    out = {
        "scaffold/entries": float(len(version.entries)),
        "scaffold/tokens": float(sum(e.tokens for e in version.entries)),
        "scaffold/version": float(version.number),
    }
    for scope_kind in ("general", "type", "task"):
        chosen = [e for e in version.entries if e.scope.split(":")[0] == scope_kind]
        out[f"scaffold/entries_{scope_kind}"] = float(len(chosen))
        out[f"scaffold/tokens_{scope_kind}"] = float(sum(e.tokens for e in chosen))
    return out


def review_metrics(result: ReviewResult) -> dict[str, float]:
    ops = Counter(e.op for e in result.edits)
    modes = Counter(a.mode.value for a in result.assessments)
    out = {f"edits/{op}": float(ops.get(op, 0)) for op in ("ADD", "UPDATE", "DELETE")}
    out.update(
        {f"review/mode_{m}": float(modes.get(m, 0)) for m in ("EXPAND", "REVISE", "COMPRESS", "PRUNE")}
    )
    out["review/refused_sets"] = float(len(result.refused))
    out["review/fallback"] = float(result.fallback)
    out["review/fallback_streak"] = float(result.fallback_streak)
    out["review/llm_faults"] = float(result.llm_faults)
    out["review/llm_calls"] = float(result.llm_calls)
    out["review/llm_seconds"] = result.llm_seconds
    out["review/llm_tokens"] = float(result.llm_tokens)
    out["review/llm_malformed"] = float(result.llm_malformed)
    out["review/llm_timeouts"] = float(result.llm_timeouts)
    if result.llm_calls:
        out["review/llm_seconds_per_call"] = result.llm_seconds / result.llm_calls
    if result.llm_calls:  # every request counts, failed ones included
        out["review/llm_tokens_per_call"] = result.llm_tokens / result.llm_calls
    out["review/over_budget"] = float(result.over_budget)
    out["review/cards"] = float(len(result.cards))
    return out
