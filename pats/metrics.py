"""Per-step metrics from rollout groups, the review and the scaffold (DESIGN.md "Metrics")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import fmean

from pats.types import ReviewResult, Rollout, RolloutGroup, ScaffoldVersion


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


def group_metrics(groups: Sequence[RolloutGroup]) -> dict[str, float]:
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
