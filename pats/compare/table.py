"""`pats compare`'s table: one row per condition over its seeds, the untrained rows (pats.compare.untrained),
and each condition against each baseline.

Held-out success is an interval over seeds and games (pats.stats), its design decided on the games
actually paired: crossed (one draw of games shared by every drawn seed) on the games every seed played
when there are any, the others left out and said in the notes; else nested, each seed on its own games.
The reliance gap is with-scaffold minus without on the same games and seeds, paired the same way; a
difference to a baseline is paired by seed id and game, over the seeds both conditions have held-out
outcomes for, and the notes name the seeds left out on either side. The other columns are per-run
numbers (means over the run's steps, or its last step's) averaged over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import fmean

from pats.compare.hosts import host_notes
from pats.compare.notes import (
    difference_notes,
    history_notes,
    intervals_notes,
    run_notes,
    seeds_notes,
    with_scaffold_notes,
)
from pats.compare.records import BaselineDifference, Comparison, ConditionRow
from pats.compare.runs import RunRecord
from pats.compare.untrained import untrained_rows
from pats.errors import PrerequisiteError
from pats.stats import DRAWS, seed_game_difference, seed_game_rate


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
    rate = seed_game_rate(bare, draws) if bare else None
    with_scaffold = seed_game_rate(scaffolded, draws).interval if scaffolded else None
    gap = seed_game_difference(scaffolded, bare, draws) if scaffolded else None
    planned = max(r.steps_planned for r in runs)
    return ConditionRow(
        condition=condition,
        scaffold_mode="/".join(sorted({r.scaffold_mode for r in runs})),
        seeds=tuple(r.seed for r in runs),
        steps=f"{min(r.steps_done for r in runs)}/{planned}" if planned else "-",
        games=rate.games if rate else (),
        episodes=rate.episodes if rate else 0,
        heldout=rate.interval if rate else None,
        heldout_with_scaffold=with_scaffold,
        reliance_gap=gap,
        design=rate.design if rate else None,
        train_success=_mean([r.train_success for r in runs]),
        informative_fraction=_mean([r.informative_fraction for r in runs]),
        plan_fraction=_mean([r.plan_fraction for r in runs]),
        prompt_tokens=_mean([r.prompt_tokens for r in runs]),
        scaffold_entries=_mean([r.scaffold_entries for r in runs]),
        scaffold_tokens=_mean([r.scaffold_tokens for r in runs]),
        edits=_mean([float(r.edits) for r in runs]),
        removals=_mean([float(r.removals) for r in runs]),
    )


def pick_baselines(
    groups: dict[str, list[RunRecord]], baselines: Sequence[str] | None
) -> tuple[tuple[str, ...], str]:
    """The named baselines, else the one condition without a scaffold (mode none); and a note."""
    if baselines:
        for b in baselines:
            if b not in groups:
                raise PrerequisiteError(
                    f"--baseline {b} is none of the conditions compared: {', '.join(sorted(groups))}"
                )
        named = tuple(dict.fromkeys(baselines))
        return named, f"Baseline{'s' if len(named) > 1 else ''}: {', '.join(named)} (named)."
    plain = [c for c, runs in groups.items() if all(r.scaffold_mode == "none" for r in runs)]
    if len(plain) == 1:
        note = f"Baseline: {plain[0]}, the one condition without a scaffold (--baseline names another)."
        return (plain[0],), note
    return (), "No baseline: name one with --baseline to get differences."


def compare(
    records: Sequence[RunRecord],
    baselines: Sequence[str] | None = None,
    draws: int = DRAWS,
    unread: Sequence[str] = (),
) -> Comparison:
    """The table of `records` grouped by condition, plus the untrained rows, against `baselines` (each
    condition minus each baseline; None: the one condition without a scaffold, if there is one).
    `unread`: notes on sweep cells with no run to read (pats.compare.runs.unread_cells)."""
    trained = _by_condition(records)
    untrained, untrained_notes = untrained_rows(records, baselines or (), list(trained))
    groups = trained | untrained
    chosen, note = pick_baselines(groups, baselines) if baselines else pick_baselines(trained, None)
    rows = tuple(_row(c, runs, draws) for c, runs in groups.items())
    differences = []
    for i, base in enumerate(chosen):
        ref = {r.seed: r.heldout for r in groups[base] if r.heldout}
        for condition, runs in groups.items():
            mine = {r.seed: r.heldout for r in runs if r.heldout}
            if condition != base and condition not in chosen[:i] and mine and ref:
                diff = seed_game_difference(mine, ref, draws)
                differences.append(BaselineDifference(base, condition, diff))
    notes = [note, *untrained_notes, *seeds_notes(groups, set(untrained)), *unread]
    notes += intervals_notes(groups, rows)
    for d in differences:
        notes += difference_notes(
            d.condition, d.baseline, groups[d.condition], groups[d.baseline], d.difference
        )
    notes += with_scaffold_notes(trained)
    notes += history_notes(trained)
    notes += host_notes(trained)
    notes += run_notes(trained)
    n = len(differences)
    if n == 1:
        notes.append("1 comparison (the difference above): its interval is 95% for that comparison.")
    elif n > 1:
        notes.append(
            f"{n} comparisons (the differences above): each interval is 95% for its own comparison, not "
            f"for {'both' if n == 2 else f'all {n}'} at once; no correction for multiple comparisons is made, so by chance about 1 "
            "in 20 such intervals misses its true difference."
        )
    return Comparison(rows, chosen, tuple(differences), tuple(notes))
