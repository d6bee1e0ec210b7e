"""`pats report RUN_DIR`: PNG plots and a short markdown summary from a run's event log.

Everything is read back from `events.jsonl` (step metrics and evaluations), so a report can be made
for a finished run, a crashed one, or one still going.
"""

from __future__ import annotations

from pathlib import Path

from pats.errors import PrerequisiteError
from pats.logging.events import read_events

PLOTS = {
    "success.png": (
        "Success rate",
        [
            ("train_with_scaffold/success", "train, with scaffold"),
            ("train_without_scaffold/success", "train, probes without scaffold"),
            ("train/success", "train, all rollouts"),
        ],
        [
            ("eval/success", "held-out, no scaffold"),
            ("eval_with_scaffold/success", "held-out, with scaffold"),
        ],
    ),
    "scaffold.png": ("Scaffold size", [("scaffold/entries", "entries"), ("scaffold/tokens", "tokens")], []),
    "edits.png": (
        "Edits per step",
        [("edits/ADD", "ADD"), ("edits/UPDATE", "UPDATE"), ("edits/DELETE", "DELETE")],
        [],
    ),
    "prompt_tokens.png": (
        "Prompt tokens per rollout",
        [
            ("train_with_scaffold/prompt_tokens", "with scaffold"),
            ("train_without_scaffold/prompt_tokens", "without scaffold"),
        ],
        [],
    ),
    "informative.png": (
        "Informative-group fraction (non-zero GRPO advantage)",
        [("train/informative_fraction", "train")],
        [],
    ),
}


def _series(rows: list[tuple[int, dict]], key: str) -> tuple[list[int], list[float]]:
    points = [(step, m[key]) for step, m in rows if key in m]
    return [p[0] for p in points], [p[1] for p in points]


def write_report(run_dir: Path) -> list[Path]:
    events_path = run_dir / "events.jsonl"
    if not events_path.is_file():
        raise PrerequisiteError(f"{run_dir} has no events.jsonl; give the folder of a pats run (runs/<name>)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [(e["step"], e["metrics"]) for e in read_events(events_path, "step_end")]
    evals = [(e["step"] + 1, e["metrics"]) for e in read_events(events_path, "eval")]
    out_dir = run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (title, train_keys, eval_keys) in PLOTS.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        drawn = False
        for key, label in train_keys:
            xs, ys = _series(steps, key)
            if xs:
                ax.plot(xs, ys, label=label, marker="." if len(xs) < 40 else None)
                drawn = True
        for key, label in eval_keys:
            xs, ys = _series(evals, key)
            if xs:
                ax.plot(xs, ys, label=label, marker="o", linestyle="--")
                drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_title(title)
        ax.set_xlabel("training step (evaluations after the step)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        written.append(out_dir / name)
    summary = out_dir / "summary.md"
    summary.write_text(_summary(run_dir, steps, evals, written), encoding="utf-8")
    return [*written, summary]


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _summary(run_dir: Path, steps, evals, plots) -> str:
    lines = [f"# Run report: {run_dir.name}", ""]
    lines.append(f"Steps completed: {len(steps)}. Evaluations: {len(evals)}.")
    if steps:
        first, last = steps[0][1], steps[-1][1]
        inf = [m.get("train/informative_fraction", 0.0) for _, m in steps]
        lines += ["", "| metric | first step | last step |", "| --- | --- | --- |"]
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
    if evals:
        lines += [
            "",
            "| evaluated after step | held-out success (no scaffold) | with scaffold | reliance gap |",
            "| --- | --- | --- | --- |",
        ]
        for step, m in evals:
            lines.append(
                f"| {step} | {_fmt(m.get('eval/success', '-'))} | "
                f"{_fmt(m.get('eval_with_scaffold/success', '-'))} | {_fmt(m.get('eval/reliance_gap', '-'))} |"
            )
    lines += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    if (run_dir / "scaffold" / "versions").is_dir():
        from pats.scaffold.history import format_history, open_store

        history = format_history(open_store(run_dir).versions())
        lines += ["## Scaffold history (`pats scaffold`)", "", "```", history, "```", ""]
    return "\n".join(lines)
