"""`pats compare`'s table: one row per condition over its seeds, and each condition against a baseline.

Held-out success is an interval over seeds and games (pats.stats): crossed (one draw of games shared by
every drawn seed) when all seeds played the same games, as the cells of a sweep do, else nested. The
reliance gap is with-scaffold minus without on the same games and seeds, paired the same way; the
difference to the baseline is paired by seed and game over the seeds both conditions ran. The other
columns are per-run numbers (means over the run's steps, or its last step's) averaged over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from pats.compare.runs import RunRecord
from pats.errors import PrerequisiteError
from pats.stats import DRAWS, Design, Difference, Interval, seed_game_difference, seed_game_rate


@dataclass(frozen=True)
class ConditionRow:
    condition: str
    scaffold_mode: str
    seeds: tuple[int, ...]
    steps: str  # "done/planned", the fewest over seeds
    games: int  # held-out games of the last evaluation (per seed, the most)
    episodes: int  # held-out episodes over all seeds
    heldout: Interval | None  # None: never evaluated
    heldout_with_scaffold: Interval | None
    reliance_gap: Difference | None  # with - without the scaffold
    design: Design | None
    train_success: float
    informative_fraction: float
    prompt_tokens: float
    scaffold_entries: float
    scaffold_tokens: float
    edits: float
    removals: float


@dataclass(frozen=True)
class BaselineDifference:
    condition: str
    difference: Difference  # held-out success without the scaffold, condition - baseline


@dataclass(frozen=True)
class Comparison:
    rows: tuple[ConditionRow, ...]
    baseline: str | None
    differences: tuple[BaselineDifference, ...]
    notes: tuple[str, ...]


def _by_condition(records: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    out: dict[str, list[RunRecord]] = {}
    for r in records:
        twin = next((o for o in out.get(r.condition, []) if o.seed == r.seed), None)
        if twin is not None:
            raise PrerequisiteError(
                f"two runs of condition {r.condition} with seed {r.seed}: {twin.run_dir} and {r.run_dir}; "
                "give one of them (a condition is a run's name without its -s<seed>)"
            )
        out.setdefault(r.condition, []).append(r)
    return {c: sorted(rs, key=lambda r: r.seed) for c, rs in out.items()}


def _mean(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return fmean(values) if values else math.nan


def _row(condition: str, runs: list[RunRecord], draws: int) -> ConditionRow:
    bare = {r.seed: r.heldout for r in runs if r.heldout}
    scaffolded = {r.seed: r.heldout_with_scaffold for r in runs if r.heldout_with_scaffold}
    heldout, design = seed_game_rate(bare, draws) if bare else (None, None)
    with_scaffold = seed_game_rate(scaffolded, draws)[0] if scaffolded else None
    gap = seed_game_difference(scaffolded, bare, draws) if scaffolded else None
    return ConditionRow(
        condition=condition,
        scaffold_mode="/".join(sorted({r.scaffold_mode for r in runs})),
        seeds=tuple(r.seed for r in runs),
        steps=f"{min(r.steps_done for r in runs)}/{max(r.steps_planned for r in runs)}",
        games=max((len(o) for o in bare.values()), default=0),
        episodes=sum(len(v) for o in bare.values() for v in o.values()),
        heldout=heldout,
        heldout_with_scaffold=with_scaffold,
        reliance_gap=gap,
        design=design,
        train_success=_mean([r.train_success for r in runs]),
        informative_fraction=_mean([r.informative_fraction for r in runs]),
        prompt_tokens=_mean([r.prompt_tokens for r in runs]),
        scaffold_entries=_mean([r.scaffold_entries for r in runs]),
        scaffold_tokens=_mean([r.scaffold_tokens for r in runs]),
        edits=_mean([float(r.edits) for r in runs]),
        removals=_mean([float(r.removals) for r in runs]),
    )


def pick_baseline(groups: dict[str, list[RunRecord]], baseline: str | None) -> tuple[str | None, str]:
    """The named baseline, else the one condition without a scaffold (mode none); and a note."""
    if baseline is not None:
        if baseline not in groups:
            raise PrerequisiteError(
                f"--baseline {baseline} is none of the conditions compared: {', '.join(sorted(groups))}"
            )
        return baseline, f"Baseline: {baseline} (named)."
    plain = [c for c, runs in groups.items() if all(r.scaffold_mode == "none" for r in runs)]
    if len(plain) == 1:
        return plain[
            0
        ], f"Baseline: {plain[0]}, the one condition without a scaffold (--baseline names another)."
    return None, "No baseline: name one with --baseline to get differences."


def compare(records: Sequence[RunRecord], baseline: str | None = None, draws: int = DRAWS) -> Comparison:
    groups = _by_condition(records)
    base, note = pick_baseline(groups, baseline)
    rows = tuple(_row(c, runs, draws) for c, runs in groups.items())
    notes = [note]
    differences = []
    if base is not None:
        ref = {r.seed: r.heldout for r in groups[base] if r.heldout}
        for condition, runs in groups.items():
            mine = {r.seed: r.heldout for r in runs if r.heldout}
            if condition != base and mine and ref:
                differences.append(BaselineDifference(condition, seed_game_difference(mine, ref, draws)))
    for runs in groups.values():
        for r in runs:
            if r.steps_done < r.steps_planned:
                notes.append(
                    f"{r.run_dir.name}: {r.steps_done} of {r.steps_planned} steps done (still going or stopped)."
                )
            if not r.heldout:
                notes.append(
                    f"{r.run_dir.name}: no held-out evaluation with per-game outcomes; left out of the intervals."
                )
    by_eval = [r.run_dir.name for runs in groups.values() for r in runs if r.heldout_source == "pats eval"]
    if by_eval:
        notes.append(f"Held-out outcomes from `pats eval` (report/outcomes_eval.json): {', '.join(by_eval)}.")
    evaluated = {r.eval_step for runs in groups.values() for r in runs if r.heldout}
    if len(evaluated) > 1:
        notes.append(f"The runs' last evaluations measured different steps' checkpoints: {sorted(s for s in evaluated if s is not None)}.")  # fmt: skip
    return Comparison(rows, base, tuple(differences), tuple(notes))
