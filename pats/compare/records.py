"""The records `pats compare` builds (pats.compare.table) and writes (pats.compare.output): a row per
condition, each condition's difference to a baseline, and the whole comparison with its notes."""

from __future__ import annotations

from dataclasses import dataclass

from pats.stats import Design, Difference, Interval


@dataclass(frozen=True)
class ConditionRow:
    condition: str
    scaffold_mode: str  # "-" for an untrained row
    seeds: tuple[int, ...]
    steps: str  # "done/planned", the fewest over seeds ("-" for an untrained row)
    games: tuple[tuple[int, int], ...]  # (seed, held-out games it contributed to the interval)
    episodes: int  # held-out episodes in the interval, over all seeds
    heldout: Interval | None  # None: never evaluated
    heldout_with_scaffold: Interval | None
    reliance_gap: Difference | None  # with - without the scaffold
    design: Design | None
    train_success: float
    informative_fraction: float
    plan_fraction: float  # groups shown a plan of their task (pats.metrics' coverage), mean over steps
    prompt_tokens: float
    scaffold_entries: float
    scaffold_tokens: float
    edits: float
    removals: float


@dataclass(frozen=True)
class BaselineDifference:
    baseline: str
    condition: str
    difference: Difference  # held-out success without the scaffold, condition - baseline


@dataclass(frozen=True)
class Comparison:
    rows: tuple[ConditionRow, ...]
    baselines: tuple[str, ...]
    differences: tuple[BaselineDifference, ...]  # by baseline, then by row
    notes: tuple[str, ...]
