"""`pats compare`'s notes under the table: what each interval rests on where that is not the whole of
what was run (seeds missing, games left out, games shared in part), and each run's state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from pats.compare.runs import RunRecord
from pats.stats import Difference

if TYPE_CHECKING:
    from pats.compare.records import ConditionRow


def seeds_text(seeds: Sequence[int]) -> str:
    if not seeds:
        return "no seed"
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def games_text(games: Sequence[tuple[int, int]]) -> str:
    """Games per seed: `6 per seed` where every seed has as many, else `s0 12, s1 6`."""
    if len({n for _, n in games}) == 1:
        return f"{games[0][1]} per seed"
    return ", ".join(f"s{s} {n}" for s, n in games)


def _played(runs: Sequence[RunRecord]) -> list[tuple[int, int]]:
    return [(r.seed, len(r.heldout)) for r in runs if r.heldout]


def seeds_notes(groups: Mapping[str, Sequence[RunRecord]], untrained: Collection[str]) -> list[str]:
    """A condition without a run of a seed other conditions ran, and the seeds its row rests on."""
    every = sorted({r.seed for runs in groups.values() for r in runs})
    notes = []
    for condition, runs in groups.items():
        missing = [s for s in every if s not in {r.seed for r in runs}]
        if not missing:
            continue
        rests = f"its row rests on {seeds_text([r.seed for r in runs if r.heldout])}"
        if condition in untrained:
            notes.append(
                f"{condition}: no evaluation of the untrained policy for {seeds_text(missing)} (eval.at_start: "
                f"true in a cell of {'that seed' if len(missing) == 1 else 'those seeds'} adds it); {rests}."
            )
        else:
            them = "it" if len(missing) == 1 else "them"
            notes.append(
                f"{condition}: no run of {seeds_text(missing)} (other conditions have {them}); {rests}."
            )
    return notes


def with_scaffold_notes(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """A condition whose with-scaffold column (and reliance gap) rests on fewer seeds than its row lists:
    which seeds it holds, and why the others have no with-scaffold outcomes."""
    notes = []
    for condition, runs in groups.items():
        bare = [r for r in runs if r.heldout]
        held = [r.seed for r in bare if r.heldout_with_scaffold]
        lacking = [r for r in bare if not r.heldout_with_scaffold]
        if not held or not lacking:
            continue
        why = "; ".join(
            f"{r.run_dir.name}: "
            + (
                "its `pats eval` ran without --with-scaffold (rerun it with --with-scaffold)"
                if r.heldout_source == "pats eval"
                else "its last evaluation played no episodes with the scaffold"
            )
            for r in lacking
        )
        notes.append(
            f"{condition}: held-out success with the scaffold and the reliance gap rest on {seeds_text(held)} "
            f"only, without the scaffold on {seeds_text([r.seed for r in bare])} ({why})."
        )
    return notes


def intervals_notes(groups: Mapping[str, Sequence[RunRecord]], rows: Sequence[ConditionRow]) -> list[str]:
    """Rows whose interval left games out (crossed on the games every seed played), or whose seeds share
    some games though none in common (nested, which counts a shared game once per seed)."""
    notes = []
    for row in rows:
        runs = [r for r in groups[row.condition] if r.heldout]
        played = _played(runs)
        if row.design == "crossed" and played != list(row.games):
            notes.append(
                f"{row.condition}: seeds played different held-out games ({games_text(played)}); its "
                f"intervals use the {row.games[0][1]} games every seed played (crossed), the others are left "
                "out. Evaluate every cell on the same games (`pats eval CELL --tasks N` on each) to use them all."
            )
        if row.design == "nested" and any(
            n > 1 for n in Counter(g for r in runs for g in r.heldout).values()
        ):
            notes.append(
                f"{row.condition}: no game is shared by every seed, yet some seeds share games: the nested "
                "interval counts such a game once per seed, as if they were different games, which can make "
                "it too narrow. Evaluate every seed on the same games."
            )
    return notes


def difference_notes(
    condition: str, baseline: str, mine: Sequence[RunRecord], ref: Sequence[RunRecord], d: Difference
) -> list[str]:
    """The seeds a difference left out, on either side, and the games it left out."""
    have = {r.seed for r in mine if r.heldout}
    base = {r.seed for r in ref if r.heldout}
    every = sorted({r.seed for r in [*mine, *ref]})
    paired = [s for s in every if s in have and s in base]
    notes = []
    why: dict[str, list[int]] = {}
    for s in every:
        if s not in paired:
            who = baseline if s in base else condition if s in have else None
            why.setdefault(
                f"only {who} has held-out outcomes" if who else "neither has held-out outcomes", []
            ).append(s)
    if why:
        reasons = "; ".join(f"{seeds_text(seeds)}: {reason}" for reason, seeds in why.items())
        notes.append(f"{condition} minus {baseline}: paired on {seeds_text(paired)} only ({reasons}).")
    used = dict(d.games)
    played = [
        (name, [(s, n) for s, n in _played(runs) if s in used])
        for name, runs in ((condition, mine), (baseline, ref))
    ]
    if any(n > used[s] for _, games in played for s, n in games):
        sides = "; ".join(f"{name}: {games_text(games)}" for name, games in played)
        on = (
            f"on the {d.games[0][1]} games every seed of both played"
            if d.design == "crossed"
            else "in each seed, on the games both played"
        )
        notes.append(f"{condition} minus {baseline}: {on} ({sides}), the others left out.")
    return notes


def history_notes(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """Conditions that trained alike in a seed: the same environment, policy, trainer and warm start, and
    the same scaffold history (every version's step and content, or none at all), so the policy was
    shown the same prompts there whatever else their specs say: one result, not two. When every such
    pair differs, a note says so, as the check a comparison of methods rests on. Only runs that did
    every step are compared: a run still going has not written the rest of its history (run_notes names
    it)."""
    notes = []
    compared = 0  # (pair, seed) with the same setup: whose histories tell whether the pair differed
    names = list(groups)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            theirs = {r.seed: r for r in groups[b] if _finished(r)}
            same = [
                (r, theirs[r.seed])
                for r in groups[a]
                if _finished(r) and r.seed in theirs and r.setup == theirs[r.seed].setup
            ]
            compared += len(same)
            alike = sorted(r.seed for r, t in same if r.scaffold_history == t.scaffold_history)
            if alike:
                notes.append(
                    f"{a} and {b} trained alike in {seeds_text(alike)}: the same environment, policy, trainer "
                    "and warm start, and the same scaffold history (the same versions at the same steps, or "
                    "none), so there they are one result, not two (`pats scaffold CELL` shows a cell's versions)."
                )
    if compared and not notes:
        notes.append(
            "Every pair of conditions with the same environment, policy, trainer and warm start showed the "
            "policy different scaffold histories in each seed they share."
        )
    return notes


def _finished(run: RunRecord) -> bool:
    return run.steps_done >= run.steps_planned


def run_notes(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """Runs still going or stopped, runs without held-out outcomes, outcomes from `pats eval`, and last
    evaluations of different steps."""
    notes = []
    runs = [r for rs in groups.values() for r in rs]
    for r in runs:
        if not _finished(r):
            notes.append(
                f"{r.run_dir.name}: {r.steps_done} of {r.steps_planned} steps done (still going or stopped)."
            )
        if not r.heldout:
            notes.append(
                f"{r.run_dir.name}: no held-out evaluation of a trained checkpoint with per-game outcomes; "
                "left out of the intervals."
            )
    by_eval = [r.run_dir.name for r in runs if r.heldout_source == "pats eval"]
    if by_eval:
        notes.append(f"Held-out outcomes from `pats eval` (report/outcomes_eval.json): {', '.join(by_eval)}.")
    evaluated = sorted({r.eval_step for r in runs if r.heldout and r.eval_step is not None})
    if len(evaluated) > 1:
        notes.append(f"The runs' last evaluations measured different steps' checkpoints: {evaluated}.")
    return notes
