"""`pats compare`'s untrained rows: each seed's evaluation of the untrained policy (the one before
training, `eval.at_start`), compared like a condition: per seed, on the same games.

That evaluation is the same for every condition of a seed when the untrained policy, its games and its
sampling are the same (`Start`: the policy section, policy.model and policy.init_adapter among it; the
environment; the held-out games and episodes; the trainer backend; and the seed, which pairing by seed
id matches). So a campaign runs it in one condition's cells only (`eval.at_start: true` in its
baseline, false in the others), and the row takes each seed's evaluation from whichever cell of that
seed, among the cells of the same start, has one (a named baseline's first). Cells of another start
are not given it: they get a row of their own from their own at-start evaluations, or none, and the
table's notes say which fields differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from pats.compare.runs import RunRecord
from pats.compare.start import Start, differing

UNTRAINED = "untrained"


def _names(items: Sequence[str]) -> str:
    return ", ".join(items)


def untrained_rows(
    cells: Sequence[RunRecord], prefer: Sequence[str], taken: Sequence[str]
) -> tuple[dict[str, list[RunRecord]], list[str]]:
    """One pseudo-condition per start among `cells` that has at-start evaluations: its runs are each
    seed's at-start evaluation as a held-out result (from a cell of a condition in `prefer` first,
    else the first condition), named `untrained` where every cell has the same start, else
    `untrained (CONDITIONS)`; and the notes on where each came from and what was not shared.
    `taken`: condition names in use (a real condition named `untrained` keeps its name)."""
    starts = list(dict.fromkeys(r.start for r in cells))
    rows: dict[str, list[RunRecord]] = {}
    notes: list[str] = []
    for start in starts:
        mine = [r for r in cells if r.start == start]
        conditions = _conditions(cells, start)
        name = UNTRAINED if len(starts) == 1 else f"{UNTRAINED} ({_names(conditions)})"
        name = name if name not in taken else f"{name} at start"
        order = [c for c in prefer if c in conditions] + [c for c in conditions if c not in prefer]
        by_seed: dict[int, RunRecord] = {}
        for r in sorted((r for r in mine if r.at_start), key=lambda r: order.index(r.condition)):
            by_seed.setdefault(r.seed, r)
        if not by_seed:
            why = "".join(
                f", and the evaluations of {c} are of another start ({_differ(start, o)}), so they are not shared"
                for o in starts
                if o != start
                for c in _sources(cells, o)
            )
            notes.append(
                f"No untrained row for {_names(conditions)}: none of {'its' if len(conditions) == 1 else 'their'} "
                f"cells evaluated the untrained policy (eval.at_start){why}."
            )
            continue
        rows[name] = [_at_start(r, name) for _, r in sorted(by_seed.items())]
        sources = list(dict.fromkeys(r.condition for _, r in sorted(by_seed.items())))
        shared = [c for c in conditions if c not in sources]
        notes.append(
            f"{name}: each seed's evaluation of the untrained policy before training (eval.at_start), from "
            f"{_names(sources)}'s cells"
            + (
                f", shared with {_names(shared)}: the same policy (policy.model, policy.init_adapter and the "
                "rest of the policy section), games, episodes and sampling seed."
                if shared
                else "."
            )
        )
    if len(starts) > 1:
        first = starts[0]
        pairs = "; ".join(
            f"{_names(_conditions(cells, first))} against {_names(_conditions(cells, o))}: {_differ(first, o)}"
            for o in starts[1:]
        )
        notes.append(
            f"The cells start from {len(starts)} different untrained policies ({pairs}): an at-start "
            "evaluation is shared only among cells of the same start."
        )
    return rows, notes


def _conditions(cells: Sequence[RunRecord], start: Start) -> list[str]:
    return list(dict.fromkeys(r.condition for r in cells if r.start == start))


def _differ(a: Start, b: Start) -> str:
    names = differing(a, b)
    return f"{_names(names)} {'differs' if len(names) == 1 else 'differ'}"


def _sources(cells: Sequence[RunRecord], start: Start) -> list[str]:
    """The conditions of `start` whose cells hold an at-start evaluation."""
    return list(dict.fromkeys(r.condition for r in cells if r.start == start and r.at_start))


def _at_start(r: RunRecord, name: str) -> RunRecord:
    """Cell `r`'s at-start evaluation as a run of the pseudo-condition `name`: no steps, no scaffold."""
    return replace(
        r,
        condition=name,
        scaffold_mode="-",
        steps_planned=0,
        steps_done=0,
        eval_step=-1,
        heldout=r.at_start,
        heldout_with_scaffold={},
        heldout_source="at start",
        train_success=math.nan,
        informative_fraction=math.nan,
        plan_fraction=math.nan,
        prompt_tokens=math.nan,
        scaffold_entries=0.0,
        scaffold_tokens=0.0,
        edits=0,
        removals=0,
        curves={},
    )
