"""The lines a finished run ends with (`pats run`) and its report opens with: held-out success of the
untrained policy (the evaluation before training, `eval.at_start`) beside the last checkpoint's, on
the same games, with intervals over games; and one line on what a run of this size can and cannot
show, read from those numbers rather than asserted.

The intervals resample games (one run is one seed): `pats.stats`. A difference whose interval holds 0
says this run cannot tell whether training changed held-out success; one that excludes 0 still
speaks for this seed only, which is what `pats sweep --seeds` and `pats compare` are for.
"""

from __future__ import annotations

from pathlib import Path

from pats.logging.events import EvalEvent, StepEndEvent, read_events
from pats.spec.models import ExperimentSpec
from pats.stats import hierarchical_difference, hierarchical_rate


def _how(spec: ExperimentSpec) -> str:
    ev = spec.eval
    drawn = "greedy" if ev.greedy else f"sampled at temperature {spec.policy.temperature:g}"
    return f"{ev.samples_per_task} episode{'s' if ev.samples_per_task > 1 else ''} per game, {drawn}"


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def heldout_summary(spec: ExperimentSpec, run_dir: Path) -> list[str]:
    """The summary lines, or none when the run has no evaluation with per-game outcomes."""
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return []
    evals = [e for e in read_events(path, EvalEvent) if e.outcomes]
    steps = len(read_events(path, StepEndEvent))
    start = next((e for e in evals if e.step == -1), None)
    trained = [e for e in evals if e.step >= 0]
    if not trained:
        return []
    last = trained[-1]
    games = len(last.outcomes)
    rate = hierarchical_rate({0: last.outcomes})
    lines = [f"held-out success without the scaffold ({games} games, {_how(spec)}):"]
    if start is None:
        lines[0] += f" after step {last.step} {rate.fmt()}"
        lines.append(
            f"What {_steps(steps)} can show: that every stage ran. What {_steps(steps)} cannot: whether "
            "training changed "
            "held-out success, since there is no evaluation of the untrained policy to compare with "
            "(eval.at_start: true adds one)."
        )
        return lines
    before = hierarchical_rate({0: start.outcomes})
    diff = hierarchical_difference({0: last.outcomes}, {0: start.outcomes}).interval
    lines[0] += (
        f" untrained {before.fmt()}, after step {last.step} {rate.fmt()}; difference {diff.fmt(signed=True)} "
        "(95%, bootstrap over games)"
    )
    if diff.lo == diff.hi == 0.0:  # both evaluations the same on every game
        cannot = (
            "whether training changed held-out success: every game ended the same way in both evaluations, "
            f"so the interval has no width and says nothing ({games} games; more games or episodes per game)"
        )
    elif diff.lo <= 0.0 <= diff.hi:
        cannot = (
            f"whether training changed held-out success: the difference's interval holds 0 on {games} games "
            "of one seed"
        )
    else:
        cannot = (
            f"that another seed would move the same way: the interval excludes 0 on these {games} games, "
            "for this seed only (pats sweep --seeds 0-3, then pats compare)"
        )
    lines.append(
        f"What {_steps(steps)} can show: that every stage ran (rollouts, evidence cards, scaffold edits, "
        f"policy updates, held-out play). What {_steps(steps)} cannot: {cannot}."
    )
    return lines
