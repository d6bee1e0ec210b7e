"""Progress of a run: a live bar in a terminal, one plain line per step and per evaluation elsewhere.

In a terminal, one bar over the training steps carries the numbers people watch. Under nohup, CI or a
cluster scheduler (stderr is not a terminal) a redrawn bar shows nothing until the end, so each step
prints one line instead (step, success, informative groups, scaffold entries and tokens, seconds), and
each evaluation one line naming the checkpoint it measured, flushed at once so `tail -f` sees it.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pats.spec.models import ExperimentSpec


def _pct(metrics: dict, key: str) -> str:
    return f"{100 * metrics[key]:.0f}%" if key in metrics else "-"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def step_line(metrics: dict[str, float]) -> str:
    """A step's numbers in one line (the bar's text in a terminal, the printed line elsewhere)."""
    success = (
        f"success {_pct(metrics, 'train_with_scaffold/success')} with / "
        f"{_pct(metrics, 'train_without_scaffold/success')} without scaffold"
        if "train_with_scaffold/success" in metrics
        else f"success {_pct(metrics, 'train/success')}"
    )
    groups = metrics.get("train/groups")
    informative = (
        f"informative {metrics.get('train/informative_groups', 0):.0f}/{groups:.0f} groups"
        if groups
        else f"informative {_pct(metrics, 'train/informative_fraction')}"
    )
    return (
        f"{success} | {informative} | "
        f"scaffold {metrics.get('scaffold/entries', 0):.0f} entries, {metrics.get('scaffold/tokens', 0):.0f} tok | "
        f"{_seconds(metrics.get('time/step_s', 0.0))}"
    )


def eval_line(metrics: dict[str, float], checkpoint: str) -> str:
    with_scaffold = (
        f", with scaffold {_pct(metrics, 'eval_with_scaffold/success')}"
        if "eval_with_scaffold/success" in metrics
        else ""
    )
    return (
        f"eval of the checkpoint {checkpoint}: held-out success {_pct(metrics, 'eval/success')} "
        f"(no scaffold){with_scaffold}"
    )


class ProgressSink:
    """A MetricSink that shows each step and prints each evaluation (see the module docstring)."""

    def __init__(self, spec: ExperimentSpec, start: int = 0, console: Console | None = None):
        self.console = console if console is not None else Console(stderr=True)
        self.name, self.steps = spec.name, spec.trainer.steps
        self.last_step: int | None = start - 1 if start > 0 else None  # None: no step trained yet
        self.live = self.console.is_terminal
        # The evaluation before training runs first and can take longer than a step: say so, rather
        # than announce a step that starts only after it.
        first = (
            "first the evaluation before training (eval.at_start)"
            if start == 0 and spec.eval.at_start
            else f"step {start}: rolling out"
        )
        if not self.live:
            if start >= self.steps:
                self._print(f"all {self.steps} steps done; nothing left to train")
            else:
                self._print(f"training steps {start}-{self.steps - 1} of {self.steps}; {first}")
            return
        self.progress = Progress(
            TextColumn("[bold]{task.fields[name]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.console,
        )
        self.task = self.progress.add_task(
            "train", total=spec.trainer.steps, completed=start, name=spec.name, info=first
        )
        self.progress.start()

    def _print(self, text: str) -> None:
        self.console.print(f"[{self.name}] {text}", markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if "eval/success" in metrics:
            # An evaluation follows the log of the step whose checkpoint it measured; one before any
            # step is the evaluation before training (eval.at_start).
            checkpoint = "before training" if self.last_step is None else f"after step {self.last_step}"
            line = eval_line(metrics, checkpoint)
            if self.live:
                self.progress.console.print(line)
                if self.last_step is None:
                    self.progress.update(self.task, info="step 0: rolling out")
            else:
                self._print(line)
            return
        self.last_step = step
        if self.live:
            self.progress.update(self.task, completed=step + 1, info=step_line(metrics))
        else:
            self._print(f"step {step} ({step + 1}/{self.steps}): {step_line(metrics)}")

    def scaffold(self, step: int, version) -> None:
        return None

    def close(self) -> None:
        if self.live:
            self.progress.stop()
