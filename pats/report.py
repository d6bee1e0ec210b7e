"""`pats report RUN_DIR`: PNG plots, the data they show, and a short markdown summary of a run.

Everything is read back from `events.jsonl` (step metrics and evaluations), so a report can be made
for a finished run, a crashed one, or one still going. Each plot's data (per series: the metric, the
steps and the values drawn, and the sideways offset it was drawn with) is written to `plots.json`
beside the PNGs, so what a plot shows can be checked against `metrics.jsonl` without reading pixels.

How the plots read: the x axis is the training step with integer ticks; every y axis is labelled with
its unit; series that may coincide (a 0.0 success rate, an edit count of 0) are drawn with distinct
hollow markers and line styles, each shifted sideways by a small fixed offset, so none hides under
another; quantities of different units (entries, tokens) get separate panels. An evaluation is drawn
at the step whose checkpoint it measured (the event's step, as `pats eval` and W&B number it); an
evaluation before training (`eval.at_start`) is drawn at "start", left of step 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pats.errors import PrerequisiteError
from pats.logging.events import EvalEvent, StepEndEvent, read_events
from pats.metrics import COVERAGE

START = -1  # the step number of an evaluation before training (eval.at_start)
OFFSET = 0.06  # sideways shift between neighbouring series of one panel, in steps
MARKERS = ("o", "s", "^", "D", "v", "P")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)))


@dataclass(frozen=True)
class Series:
    key: str  # the metric's name in metrics.jsonl / events.jsonl
    label: str
    source: Literal["step", "eval"] = "step"  # a step_end metric, or an evaluation's


@dataclass(frozen=True)
class Panel:
    ylabel: str  # what is plotted and its unit
    series: tuple[Series, ...]
    bars: bool = False  # counts per step as grouped bars instead of lines
    unit_interval: bool = False  # a fraction: the axis shows 0..1 whatever the data


@dataclass(frozen=True)
class Plot:
    file: str
    title: str
    panels: tuple[Panel, ...]


SUCCESS = "success rate (fraction of episodes won)"
COVERAGE_LABELS = {"plan": "shown a plan", "other": "other guidance, no plan", "none": "shown nothing"}


def _by_class(what: str, label: str) -> tuple[Series, ...]:
    """One series per coverage class (pats.metrics.COVERAGE) of `coverage/<class>_<what>`."""
    return tuple(Series(f"coverage/{c}_{what}", f"{COVERAGE_LABELS[c]}{label}") for c in COVERAGE)


PLOTS = (
    Plot(
        "success.png",
        "Success rate",
        (
            Panel(
                SUCCESS,
                (
                    Series("train/success", "train, all rollouts"),
                    Series("train_with_scaffold/success", "train, with scaffold"),
                    Series("train_without_scaffold/success", "train, probes without scaffold"),
                    Series("eval/success", "held-out, no scaffold (checkpoint of the step)", "eval"),
                    Series("eval_with_scaffold/success", "held-out, with scaffold", "eval"),
                ),
                unit_interval=True,
            ),
        ),
    ),
    Plot(
        "scaffold.png",
        "Scaffold size after each step's review",
        (
            Panel("entries (count)", (Series("scaffold/entries", "entries"),)),
            Panel("tokens (policy tokenizer)", (Series("scaffold/tokens", "tokens"),)),
        ),
    ),
    Plot(
        "edits.png",
        "Edits applied per step",
        (
            Panel(
                "edits (count)",
                (
                    Series("edits/ADD", "ADD"),
                    Series("edits/UPDATE", "UPDATE"),
                    Series("edits/DELETE", "DELETE"),
                ),
                bars=True,
            ),
        ),
    ),
    Plot(
        "prompt_tokens.png",
        "Prompt tokens per rollout",
        (
            Panel(
                "prompt tokens per rollout (mean, policy tokenizer)",
                (
                    Series("train/prompt_tokens", "all rollouts"),
                    Series("train_with_scaffold/prompt_tokens", "with scaffold"),
                    Series("train_without_scaffold/prompt_tokens", "probes without scaffold"),
                ),
            ),
        ),
    ),
    Plot(
        "informative.png",
        "Informative groups (non-zero GRPO advantage)",
        (
            Panel(
                "informative groups (fraction of the step's groups)",
                (Series("train/informative_fraction", "train"),),
                unit_interval=True,
            ),
        ),
    ),
    Plot(
        "coverage.png",
        "Guidance coverage: what each rollout group's view showed",
        (
            Panel("groups (share of the step's)", _by_class("fraction", ""), unit_interval=True),
            Panel(
                "informative (share of the class)",
                _by_class("informative_fraction", ""),
                unit_interval=True,
            ),
            Panel(
                "train success (fraction won)",
                (
                    *_by_class("success_with_scaffold", ", with scaffold"),
                    *_by_class("success_without_scaffold", ", probes"),
                ),
                unit_interval=True,
            ),
            Panel(
                "plan steps (mean, groups shown one)",
                (Series("coverage/plan_steps", "steps of the plans shown"),),
            ),
        ),
    ),
)


def plot_data(plot: Plot, steps: list[tuple[int, dict]], evals: list[tuple[int, dict]]) -> dict:
    """What `plot` draws: per panel, each series with data as {key, label, source, x, y, offset}."""
    panels = []
    for panel in plot.panels:
        drawn: list[dict[str, Any]] = []
        for series in panel.series:
            rows = steps if series.source == "step" else evals
            points = [(step, m[series.key]) for step, m in rows if series.key in m]
            if points:
                drawn.append(
                    {
                        "key": series.key,
                        "label": series.label,
                        "source": series.source,
                        "x": [p[0] for p in points],
                        "y": [p[1] for p in points],
                    }
                )
        middle = (len(drawn) - 1) / 2
        for i, line in enumerate(drawn):
            line["offset"] = round((i - middle) * (0.8 / len(drawn) if panel.bars else OFFSET), 6)
        panels.append(
            {
                "ylabel": panel.ylabel,
                "bars": panel.bars,
                "unit_interval": panel.unit_interval,
                "series": drawn,
            }
        )
    return {"title": plot.title, "panels": panels}


def draw(data: dict):
    """A matplotlib Figure of one plot's data (as `plot_data` returns it); None when nothing is drawn."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [p for p in data["panels"] if p["series"]]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 + 1.8 * len(panels)), sharex=True, squeeze=False)
    xs = sorted({x for p in panels for s in p["series"] for x in s["x"]})
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        for i, s in enumerate(panel["series"]):
            x = [v + s["offset"] for v in s["x"]]
            if panel["bars"]:
                width = 0.8 / len(panel["series"])
                bars = ax.bar(
                    x, s["y"], width=width, label=s["label"], hatch=("", "//", "..")[i % 3], edgecolor="black"
                )
                # A marker on each bar's top, so a count of 0 still shows where its bar would be.
                ax.plot(x, s["y"], linestyle="none", marker=MARKERS[i % len(MARKERS)], color="black",
                        markerfacecolor=bars.patches[0].get_facecolor(), markersize=5)  # fmt: skip
            else:
                ax.plot(
                    x,
                    s["y"],
                    label=s["label"],
                    marker=MARKERS[i % len(MARKERS)],
                    markerfacecolor="none",
                    linestyle=LINESTYLES[i % len(LINESTYLES)],
                )
        ax.set_ylabel(panel["ylabel"], fontsize=8)
        if panel["unit_interval"]:
            ax.set_ylim(-0.05, 1.05)
        else:  # from just below 0, so a point or marker at 0 is not cut by the axis
            top = max(ax.get_ylim()[1], 1.0)
            ax.set_ylim(-0.04 * top, top)
        if panel["bars"]:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    bottom = axes[-1, 0]
    bottom.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ticks = xs  # every step its tick; on long runs integer ticks at matplotlib's spacing
    if len(xs) > 25:
        ticks = [
            int(t) for t in MaxNLocator(integer=True).tick_values(min(xs), max(xs)) if xs[0] <= t <= xs[-1]
        ]
    bottom.set_xticks(ticks, ["start" if t == START else str(t) for t in ticks])
    evaluated = any(s["source"] == "eval" for p in panels for s in p["series"])
    bottom.set_xlabel(
        "training step"
        + (" (an evaluation sits at the step whose checkpoint it measured)" if evaluated else "")
    )
    axes[0, 0].set_title(data["title"])
    fig.tight_layout()
    return fig


def write_report(run_dir: Path) -> list[Path]:
    events_path = run_dir / "events.jsonl"
    if not events_path.is_file():
        raise PrerequisiteError(f"{run_dir} has no events.jsonl; give the folder of a pats run (runs/<name>)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [(e.step, e.metrics) for e in read_events(events_path, StepEndEvent)]
    evals = [(e.step, e.metrics) for e in read_events(events_path, EvalEvent)]
    out_dir = run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    written, shown = [], {}
    for plot in PLOTS:
        data = plot_data(plot, steps, evals)
        fig = draw(data)
        if fig is None:
            continue
        fig.savefig(out_dir / plot.file, dpi=100)
        plt.close(fig)
        written.append(out_dir / plot.file)
        shown[plot.file] = data
    data_file = out_dir / "plots.json"
    data_file.write_text(json.dumps(shown, indent=1), encoding="utf-8")
    summary = out_dir / "summary.md"
    summary.write_text(_summary(run_dir, steps, evals, written), encoding="utf-8")
    return [*written, data_file, summary]


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def checkpoint_name(step: int) -> str:
    """How a report names the checkpoint an evaluation measured."""
    return "start (before step 0)" if step == START else f"after step {step}"


def _coverage_table(steps: list[dict]) -> list[str]:
    """Guidance coverage as means over the steps (each over the steps that measured it); [] for a run
    logged before pats counted it."""
    if not any("coverage/none_fraction" in m for m in steps):
        return []

    def mean(key: str, digits: int = 3) -> str:
        values = [m[key] for m in steps if key in m]
        return f"{sum(values) / len(values):.{digits}f}" if values else "-"

    lines = [
        "",
        "Guidance coverage (pats.metrics): groups by what their view showed; means over the steps (a "
        "class's rates over the steps it had groups in)",
        "",
        "| groups | share of groups | informative | train success with scaffold | probes without |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for c in COVERAGE:
        lines.append(
            f"| {COVERAGE_LABELS[c]} | {mean(f'coverage/{c}_fraction')} | "
            f"{mean(f'coverage/{c}_informative_fraction')} | {mean(f'coverage/{c}_success_with_scaffold')} | "
            f"{mean(f'coverage/{c}_success_without_scaffold')} |"
        )
    cut = sum(m.get("coverage/plan_cut_groups", 0.0) for m in steps)
    return [*lines, "", f"Plan steps shown per group shown a plan: {mean('coverage/plan_steps', 1)}; "
            f"groups shown a plan cut to fit: {cut:.0f}."]  # fmt: skip


def _summary(run_dir: Path, steps, evals, plots) -> str:
    lines = [f"# Run report: {run_dir.name}", ""]
    lines.append(f"Steps completed: {len(steps)}. Evaluations: {len(evals)}.")
    if (run_dir / "spec.yaml").is_file():  # held-out success against the untrained policy's, first
        from pats.engine.summary import heldout_summary
        from pats.spec import load_spec

        lines += ["", *heldout_summary(load_spec(run_dir / "spec.yaml"), run_dir)]
    if steps:
        first, last = steps[0][1], steps[-1][1]
        inf = [m.get("train/informative_fraction", 0.0) for _, m in steps]
        lines += ["", f"| metric | step {steps[0][0]} | step {steps[-1][0]} |", "| --- | --- | --- |"]
        for key in (
            "train/success",
            "train_with_scaffold/success",
            "train_without_scaffold/success",
            "scaffold/entries",
            "scaffold/tokens",
            "train/prompt_tokens",
            "time/step_s",
        ):
            if key in first or key in last:
                lines.append(f"| {key} | {_fmt(first.get(key, '-'))} | {_fmt(last.get(key, '-'))} |")
        lines += ["", f"Mean informative-group fraction: {sum(inf) / len(inf):.3f}"]
        lines += _coverage_table([m for _, m in steps])
    if evals:
        lines += [
            "",
            "| checkpoint evaluated | held-out success (no scaffold) | with scaffold | reliance gap |",
            "| --- | --- | --- | --- |",
        ]
        for step, m in evals:
            lines.append(
                f"| {checkpoint_name(step)} | {_fmt(m.get('eval/success', '-'))} | "
                f"{_fmt(m.get('eval_with_scaffold/success', '-'))} | {_fmt(m.get('eval/reliance_gap', '-'))} |"
            )
    lines += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    if (run_dir / "scaffold" / "versions").is_dir():
        from pats.scaffold.history import format_history, open_store

        history = format_history(open_store(run_dir).versions())
        lines += ["## Scaffold history (`pats scaffold`)", "", "```", history, "```", ""]
    return "\n".join(lines)
