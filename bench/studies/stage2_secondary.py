"""Besides the endpoints, what did each Stage 2 cell's training do: how often were its groups shown a
plan and informative, how did the probes fare, what did the loop edit, and how did the expert actions'
likelihood move? The statement's secondary reads (docs/journal/2026-12-06-stage2.md, "Secondary, read
and not tested"), from the committed grid cells alone (no play), per cell:

- training: success of the scaffolded rollouts and of the probes (`none`: every rollout), informative
  groups, and those of the groups shown a plan (the plan coverage class);
- guidance: the share of groups shown a plan, plan steps shown, plans cut; edits by kind (ADD, UPDATE,
  DELETE: removals) and the scaffold's last size;
- the expert actions' likelihood (`eval.gap_tasks` pool games): mean NLL without the scaffold at the
  evaluation before training (the untrained policy, from `stage2-none`'s cell of the seed) and after the
  last step, and the gap to the NLL with the scaffold there;
- the with-line check: bench/studies/stage2_with_line.py's own table of its files.

The endpoints and their intervals are `pats compare`'s; this reads, it does not test.

    python bench/studies/stage2_secondary.py                 # prints the tables (markdown)
    python bench/studies/stage2_secondary.py --cells DIR      # another grid folder

Writes bench/results/stage2_secondary.md (what it prints).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS  # noqa: E402
from pats.logging.events import EvalEvent, StepEndEvent, read_events  # noqa: E402
from pats.sweep.record import read_status  # noqa: E402

GRID = RESULTS / "sweeps" / "stage2"
OUT = RESULTS / "stage2_secondary.md"
CONDITIONS = ("stage2-none", "stage2-static-expert", "stage2-pats-expert")


@dataclass(frozen=True)
class Cell:
    """One finished cell's secondary numbers (None where the cell has no such number)."""

    condition: str
    seed: int
    scaffolded_success: float | None  # train_with_scaffold/success over the steps (none: train/success)
    probe_success: float | None  # train_without_scaffold/success
    informative: float
    informative_plan: float | None  # coverage/plan_informative_fraction, over the steps that had such groups
    plan_fraction: float
    plan_steps: float | None
    plans_cut: int
    adds: int
    updates: int
    removals: int
    entries_last: float
    nll_end: float | None  # eval/expert_nll after the last step
    gap_end: float | None  # eval/likelihood_gap after the last step
    nll_start: float | None  # eval/expert_nll before training (the none cell's, shared by its seed)


def _mean(rows: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return mean(values) if values else None


def read_cell(folder: Path) -> Cell:
    name = folder.name
    condition, _, seed = name.rpartition("-s")
    events = read_events(folder / "events.jsonl")  # read once: the step ends and the evaluations
    steps = [e.metrics for e in events if isinstance(e, StepEndEvent)]
    evals = [e for e in events if isinstance(e, EvalEvent)]
    start = next((e.metrics for e in evals if e.step < 0), {})
    end = next((e.metrics for e in reversed(evals) if e.step >= 0), {})
    scaffolded = "train_with_scaffold/success" if condition != "stage2-none" else "train/success"
    plan_rows = [r for r in steps if r.get("coverage/plan_groups", 0) > 0]
    return Cell(
        condition=condition,
        seed=int(seed),
        scaffolded_success=_mean(steps, scaffolded),
        probe_success=_mean(steps, "train_without_scaffold/success"),
        informative=_mean(steps, "train/informative_fraction") or 0.0,
        informative_plan=_mean(plan_rows, "coverage/plan_informative_fraction"),
        plan_fraction=_mean(steps, "coverage/plan_fraction") or 0.0,
        plan_steps=_mean(plan_rows, "coverage/plan_steps"),
        plans_cut=int(sum(r.get("coverage/plan_cut_groups", 0) for r in steps)),
        adds=int(sum(r.get("edits/ADD", 0) for r in steps)),
        updates=int(sum(r.get("edits/UPDATE", 0) for r in steps)),
        removals=int(sum(r.get("edits/DELETE", 0) for r in steps)),
        entries_last=steps[-1].get("scaffold/entries", 0.0) if steps else 0.0,
        nll_end=end.get("eval/expert_nll"),
        gap_end=end.get("eval/likelihood_gap"),
        nll_start=start.get("eval/expert_nll"),
    )


def cells(grid: Path) -> list[Cell]:
    """Every finished cell of the grid, the untrained NLL copied from its seed's none cell."""
    read = [read_cell(f) for f in sorted(grid.iterdir()) if _finished(f)]
    start = {c.seed: c.nll_start for c in read if c.nll_start is not None}
    return [c if c.nll_start is not None else replace(c, nll_start=start.get(c.seed)) for c in read]


def _finished(folder: Path) -> bool:
    status = read_status(folder)
    return status is not None and status.status == "finished"


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


COLUMNS = (
    ("scaffolded success", lambda c: _f(c.scaffolded_success)),
    ("probes' success", lambda c: _f(c.probe_success)),
    ("informative", lambda c: _f(c.informative)),
    ("informative, shown a plan", lambda c: _f(c.informative_plan)),
    ("shown a plan", lambda c: _f(c.plan_fraction)),
    ("plan steps shown", lambda c: _f(c.plan_steps, 2)),
    ("plans cut", lambda c: str(c.plans_cut)),
    ("ADD / UPDATE / DELETE", lambda c: f"{c.adds} / {c.updates} / {c.removals}"),
    ("entries at the end", lambda c: f"{c.entries_last:.0f}"),
    ("expert NLL: untrained -> trained", lambda c: f"{_f(c.nll_start, 2)} -> {_f(c.nll_end, 2)}"),
    ("likelihood gap after training", lambda c: _f(c.gap_end, 2)),
)


def table(read: list[Cell]) -> str:
    lines = [
        "| cell | " + " | ".join(name for name, _ in COLUMNS) + " |",
        "| --- |" + " ---: |" * len(COLUMNS),
    ]
    order = {c: i for i, c in enumerate(CONDITIONS)}
    for c in sorted(read, key=lambda c: (order.get(c.condition, len(order)), c.seed)):
        lines.append(f"| {c.condition}-s{c.seed} | " + " | ".join(show(c) for _, show in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=Path, default=GRID, help="the grid folder (default: %(default)s)")
    args = parser.parse_args(argv)
    from bench.studies.stage2_with_line import report

    read = cells(args.cells)
    text = (
        f"Stage 2, secondary reads: {len(read)} finished cells of {args.cells}\n\n{table(read)}\n\n"
        f"With-line check (dev 320-335, 4 episodes a game):\n\n{report()}\n"
    )
    print(text, end="")
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
