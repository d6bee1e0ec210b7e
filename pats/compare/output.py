"""`pats compare`'s files: the table as markdown and CSV, and the conditions' curves overlaid in a PNG."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from pats.compare.runs import RunRecord
from pats.compare.table import Comparison
from pats.stats import Difference, Interval

INTERVALS = (
    "Intervals: 95%, percentile bootstrap over seeds and games (pats/stats.py), 2000 draws, fixed RNG "
    "seed. Crossed: seeds drawn with replacement and one draw of games shared by every drawn seed (all "
    "seeds played the same games); nested: games drawn within each drawn seed. At a rate of 0 or 1, "
    "Wilson's interval over the games (crossed) or the (seed, game) units (nested). Per seed: the difference in each seed."
)


def _num(x: float, digits: int = 3) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def _interval(i: Interval | None, signed: bool = False) -> str:
    return "-" if i is None or math.isnan(i.estimate) else i.fmt(signed=signed)


def _difference(d: Difference | None) -> str:
    return "-" if d is None or math.isnan(d.interval.estimate) else d.interval.fmt(signed=True)


def markdown(c: Comparison) -> str:
    lines = [
        f"# Comparison of {len(c.rows)} condition{'' if len(c.rows) == 1 else 's'}",
        "",
        "| condition | scaffold | seeds | steps | held-out games | held-out success, no scaffold | with scaffold "
        "| reliance gap (with - without) | train success | informative groups | prompt tokens "
        "| scaffold entries | scaffold tokens | edits | removals |",
        "| --- | --- | --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in c.rows:
        lines.append(
            f"| {r.condition} | {r.scaffold_mode} | {', '.join(map(str, r.seeds))} | {r.steps} | {r.games} "
            f"| {_interval(r.heldout)} | {_interval(r.heldout_with_scaffold)} | {_difference(r.reliance_gap)} "
            f"| {_num(r.train_success)} | {_num(r.informative_fraction)} | {_num(r.prompt_tokens, 1)} "
            f"| {_num(r.scaffold_entries, 1)} | {_num(r.scaffold_tokens, 1)} | {_num(r.edits, 1)} | {_num(r.removals, 1)} |"
        )
    if c.differences:
        lines += [
            "",
            f"## Held-out success (no scaffold) against {c.baseline}",
            "",
            f"| condition | minus {c.baseline} | design | per seed |",
            "| --- | --- | --- | --- |",
        ]
        for d in c.differences:
            per_seed = ", ".join(f"s{s} {v:+.3f}" for s, v in d.difference.per_seed)
            lines.append(
                f"| {d.condition} | {_difference(d.difference)} | {d.difference.design} | {per_seed} |"
            )
    lines += [
        "",
        "Held-out success: the runs' last evaluation (the final checkpoint), episodes pooled; train success, "
        "informative groups (groups whose rewards differ) and prompt tokens: means over the steps; scaffold "
        "size: after the last step; edits and removals: totals over the run; all averaged over seeds.",
        "",
        INTERVALS,
        "",
        *[f"- {n}" for n in c.notes],
        "",
    ]
    return "\n".join(lines)


def csv_text(c: Comparison) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([
        "condition", "scaffold_mode", "seeds", "steps", "games", "episodes", "design",
        "heldout", "heldout_lo", "heldout_hi", "with_scaffold", "with_scaffold_lo", "with_scaffold_hi",
        "reliance_gap", "reliance_gap_lo", "reliance_gap_hi", "train_success", "informative_fraction",
        "prompt_tokens", "scaffold_entries", "scaffold_tokens", "edits", "removals",
        "baseline", "minus_baseline", "minus_baseline_lo", "minus_baseline_hi",
    ])  # fmt: skip
    diffs = {d.condition: d.difference.interval for d in c.differences}

    def three(i: Interval | None) -> list[float | str]:
        return ["", "", ""] if i is None else [i.estimate, i.lo, i.hi]

    for r in c.rows:
        gap = r.reliance_gap.interval if r.reliance_gap else None
        w.writerow([
            r.condition, r.scaffold_mode, " ".join(map(str, r.seeds)), r.steps, r.games, r.episodes,
            r.design or "", *three(r.heldout), *three(r.heldout_with_scaffold), *three(gap),
            r.train_success, r.informative_fraction, r.prompt_tokens, r.scaffold_entries,
            r.scaffold_tokens, r.edits, r.removals, c.baseline or "", *three(diffs.get(r.condition)),
        ])  # fmt: skip
    return out.getvalue()


PANELS = (
    ("train/success", "train success (all rollouts)"),
    ("train/informative_fraction", "informative groups (fraction)"),
    ("eval/success", "held-out success, no scaffold"),
)


def plot(records: Sequence[RunRecord], path: Path) -> Path:
    """Per condition, the mean over its seeds at each step every seed reached, one panel per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(r.condition for r in records))
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 2.4 * len(PANELS)), sharex=True)
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for i, condition in enumerate(conditions):
            runs = [r for r in records if r.condition == condition and key in r.curves]
            if not runs:
                continue
            per_run = [dict(r.curves[key]) for r in runs]
            steps = sorted(set.intersection(*(set(p) for p in per_run)))
            means = [sum(p[s] for p in per_run) / len(per_run) for s in steps]
            ax.plot(steps, means, marker="osD^v"[i % 5], markerfacecolor="none",
                    linestyle=("-", "--", "-.", ":")[i % 4], label=f"{condition} ({len(runs)} seeds)")  # fmt: skip
        ax.set_ylabel(label, fontsize=8)
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("training step (an evaluation sits at the step whose checkpoint it measured)")
    axes[0].set_title("Conditions, mean over seeds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
