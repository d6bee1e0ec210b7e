"""`pats compare`'s files: the table as markdown and CSV, and the conditions' curves overlaid in a PNG."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from pats.compare.notes import games_text
from pats.compare.records import Comparison
from pats.compare.runs import RunRecord
from pats.stats import Difference, Interval

INTERVALS = (
    "Intervals: 95%, percentile bootstrap over seeds and games (pats/stats.py), 2000 draws, fixed RNG "
    "seed. Crossed: on the games every seed played (paired: by seed id, the games both conditions "
    "played), seeds drawn with replacement and one draw of games shared by every drawn seed; nested "
    "(no game played by every seed): games drawn within each drawn seed. At a rate of 0 or 1, "
    "Wilson's interval over the games (crossed) or the (seed, game) units (nested). Per seed: the "
    "difference in each seed. Each interval is for its own comparison (see the notes)."
)


def _num(x: float, digits: int = 3) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def _interval(i: Interval | None, signed: bool = False) -> str:
    return "-" if i is None or math.isnan(i.estimate) else i.fmt(signed=signed)


def _difference(d: Difference | None) -> str:
    return "-" if d is None or math.isnan(d.interval.estimate) else d.interval.fmt(signed=True)


def _games(games: tuple[tuple[int, int], ...]) -> str:
    return games_text(games) if games else "-"


def markdown(c: Comparison) -> str:
    lines = [
        f"# Comparison of {len(c.rows)} condition{'' if len(c.rows) == 1 else 's'}",
        "",
        "| condition | scaffold | seeds | steps | held-out games | held-out success, no scaffold | with scaffold "
        "| reliance gap (with - without) | train success | informative groups | shown a plan | prompt tokens "
        "| scaffold entries | scaffold tokens | edits | removals |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in c.rows:
        lines.append(
            f"| {r.condition} | {r.scaffold_mode} | {', '.join(map(str, r.seeds))} | {r.steps} | {_games(r.games)} "
            f"| {_interval(r.heldout)} | {_interval(r.heldout_with_scaffold)} | {_difference(r.reliance_gap)} "
            f"| {_num(r.train_success)} | {_num(r.informative_fraction)} | {_num(r.plan_fraction)} "
            f"| {_num(r.prompt_tokens, 1)} "
            f"| {_num(r.scaffold_entries, 1)} | {_num(r.scaffold_tokens, 1)} | {_num(r.edits, 1)} | {_num(r.removals, 1)} |"
        )
    for baseline in c.baselines:
        against = [d for d in c.differences if d.baseline == baseline]
        if not against:
            continue
        lines += [
            "",
            f"## Held-out success (no scaffold) against {baseline}",
            "",
            f"| condition | minus {baseline} | design | games | per seed |",
            "| --- | --- | --- | --- | --- |",
        ]
        for d in against:
            per_seed = ", ".join(f"s{s} {v:+.3f}" for s, v in d.difference.per_seed)
            lines.append(
                f"| {d.condition} | {_difference(d.difference)} | {d.difference.design} "
                f"| {_games(d.difference.games)} | {per_seed} |"
            )
    lines += [
        "",
        "Held-out success: the runs' last evaluation (the final checkpoint), episodes pooled; untrained: each "
        "seed's evaluation before training; held-out games: the games each seed contributed to the interval; "
        "train success, informative groups (groups whose rewards differ), shown a plan (groups whose view "
        "held a plan of their task; - for runs logged before pats counted it) and prompt tokens: means over "
        "the steps; scaffold size: after the last step; edits and removals: totals over the run; all averaged "
        "over seeds.",
        "",
        INTERVALS,
        "",
        *[f"- {n}" for n in c.notes],
        "",
    ]
    return "\n".join(lines)


def csv_text(c: Comparison) -> str:
    """One line per condition and baseline (one per condition where there is no baseline)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([
        "condition", "scaffold_mode", "seeds", "steps", "games", "episodes", "design",
        "heldout", "heldout_lo", "heldout_hi", "with_scaffold", "with_scaffold_lo", "with_scaffold_hi",
        "reliance_gap", "reliance_gap_lo", "reliance_gap_hi", "train_success", "informative_fraction",
        "plan_fraction", "prompt_tokens", "scaffold_entries", "scaffold_tokens", "edits", "removals",
        "baseline", "minus_baseline", "minus_baseline_lo", "minus_baseline_hi", "minus_baseline_design",
    ])  # fmt: skip
    diffs = {(d.baseline, d.condition): d.difference for d in c.differences}

    def three(i: Interval | None) -> list[float | str]:
        return ["", "", ""] if i is None else [i.estimate, i.lo, i.hi]

    for r in c.rows:
        gap = r.reliance_gap.interval if r.reliance_gap else None
        for baseline in c.baselines or ("",):
            d = diffs.get((baseline, r.condition))
            w.writerow([
                r.condition, r.scaffold_mode, " ".join(map(str, r.seeds)), r.steps,
                " ".join(f"{s}:{n}" for s, n in r.games), r.episodes, r.design or "",
                *three(r.heldout), *three(r.heldout_with_scaffold), *three(gap),
                r.train_success, r.informative_fraction, r.plan_fraction, r.prompt_tokens, r.scaffold_entries,
                r.scaffold_tokens, r.edits, r.removals, baseline,
                *three(d.interval if d else None), d.design if d else "",
            ])  # fmt: skip
    return out.getvalue()


PANELS = (
    ("train/success", "train success (all rollouts)"),
    ("train/informative_fraction", "informative groups (fraction)"),
    ("eval/success", "held-out success, no scaffold"),
)


def curves_figure(records: Sequence[RunRecord]):
    """One panel per metric: per condition, each seed's line faint and the mean over its seeds (at each
    step every seed reached) bold, in the condition's colour; whole steps on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    conditions = list(dict.fromkeys(r.condition for r in records))
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 2.4 * len(PANELS)), sharex=True)
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for i, condition in enumerate(conditions):
            runs = [r for r in records if r.condition == condition and key in r.curves]
            if not runs:
                continue
            colour = f"C{i % 10}"
            per_run = [dict(r.curves[key]) for r in runs]
            for curve in per_run:
                ax.plot(
                    list(curve), list(curve.values()), color=colour, alpha=0.3, linewidth=0.8, label="_seed"
                )
            steps = sorted(set.intersection(*(set(p) for p in per_run)))
            means = [sum(p[s] for p in per_run) / len(per_run) for s in steps]
            ax.plot(steps, means, color=colour, linewidth=2.2, marker="osD^v"[i % 5], markerfacecolor="none",
                    linestyle=("-", "--", "-.", ":")[i % 4], label=f"{condition} (mean of {len(runs)} seeds)")  # fmt: skip
        ax.set_ylabel(label, fontsize=8)
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    # Two lines: on one, the label ran past the figure's right edge and was cut off.
    axes[-1].set_xlabel(
        "training step\n(an evaluation sits at the step whose checkpoint it measured; -1: before training)",
        fontsize=9,
    )
    axes[0].set_title("Conditions: each seed faint, the mean over seeds bold")
    fig.tight_layout()
    return fig


def plot(records: Sequence[RunRecord], path: Path) -> Path:
    """`curves_figure` written to `path` as a PNG."""
    import matplotlib.pyplot as plt

    fig = curves_figure(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
