"""Live progress in the terminal: one bar over training steps, with the numbers people watch."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pats.spec.models import ExperimentSpec


def _pct(metrics: dict, key: str) -> str:
    return f"{100 * metrics[key]:.0f}%" if key in metrics else "-"


class ProgressSink:
    """A MetricSink that redraws a progress line after every step and prints each evaluation."""

    def __init__(self, spec: ExperimentSpec, start: int = 0):
        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[name]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.console,
        )
        self.task = self.progress.add_task(
            "train", total=spec.trainer.steps, completed=start, name=spec.name, info="first step: rolling out"
        )
        self.progress.start()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if "eval/success" in metrics:
            gap = (
                f", with scaffold {_pct(metrics, 'eval_with_scaffold/success')}"
                if "eval_with_scaffold/success" in metrics
                else ""
            )
            self.progress.console.print(
                f"eval after step {step + 1}: held-out success {_pct(metrics, 'eval/success')} (no scaffold){gap}"
            )
            return
        success = (
            f"success {_pct(metrics, 'train_with_scaffold/success')} with / "
            f"{_pct(metrics, 'train_without_scaffold/success')} without scaffold"
            if "train_with_scaffold/success" in metrics
            else f"success {_pct(metrics, 'train/success')}"
        )
        info = (
            f"{success} | "
            f"informative {_pct(metrics, 'train/informative_fraction')} | "
            f"scaffold {metrics.get('scaffold/entries', 0):.0f} entries, {metrics.get('scaffold/tokens', 0):.0f} tok | "
            f"{metrics.get('time/step_s', 0):.0f} s/step"
        )
        self.progress.update(self.task, completed=step + 1, info=info)

    def scaffold(self, step: int, version) -> None:
        return None

    def close(self) -> None:
        self.progress.stop()
