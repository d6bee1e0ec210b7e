"""Shared pieces of the learning, tokens and overhead benchmarks.

- the conditions: spec files + dotted overrides, run through pats' own `train()` in one run
  directory each; a finished run is skipped, an interrupted one resumed, so a long benchmark survives
  being stopped and started again with the same command;
- held-out evaluation of a run's last checkpoint with per-task outcomes (the engine's `eval` event
  keeps only means, and a paired comparison needs each task);
- statistics: Wilson intervals, area under the learning curve, a paired bootstrap over tasks, the
  smallest difference a budget can detect;
- the cost model used to print an estimate before anything runs.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

# name -> (spec file, extra overrides). Baselines are specs, not code forks (DESIGN.md).
CONDITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("experiments/baselines/grpo.yaml", ()),
    "static": ("experiments/baselines/static.yaml", ()),
    "grow": ("experiments/baselines/grow.yaml", ()),
    "pats": ("experiments/quickstart.yaml", ()),
    "no_removal": ("experiments/ablations/no_removal.yaml", ()),
    "no_outcome": ("experiments/ablations/no_outcome.yaml", ()),
    "no_contrast": ("experiments/ablations/no_contrast.yaml", ()),
    "no_failure": ("experiments/ablations/no_failure.yaml", ()),
    "no_utility": ("experiments/ablations/no_utility.yaml", ()),
}
BASELINES = ("none", "static", "grow")
ABLATIONS = ("no_removal", "no_outcome", "no_contrast", "no_failure", "no_utility")

# The harder twc setting, offered by every benchmark as --setting hard.
SETTINGS: dict[str, tuple[str, ...]] = {
    # The setting every result in docs/results.md "Learning" ran on (the quickstart's until it moved
    # to one item); stated here so those benchmarks keep measuring the same games.
    "easy": ("environment.params.numItemsToPutAway=2",),
    "hard": ("environment.params.numLocations=2", "environment.params.numItemsToPutAway=3"),
}


# -- cost model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitCosts:
    """Seconds per unit on this project's 2-core CPU (bench/results/throughput.json, notes/facts.md)."""

    turn_s: float = 0.4  # one score-mode policy turn of one episode (0.35-0.5 s measured)
    decision_s: float = 2.8  # one trained decision: 431 s / 154 decisions in throughput.json
    turns: float = 9.5  # turns per episode: most episodes fail and use all 10
    startup_s: float = 20.0  # per run: model from the cache, JVM, tokenizer, checkpoints


# Assumed share of groups that carry signal (only those are trained): the 20-step prototype saw
# 0.31 without a scaffold and 0.46 with one (facts.md); a guess, so the estimate is rough.
INFORMATIVE = {"none": 0.3, "static": 0.4, "grow": 0.4}
INFORMATIVE_DEFAULT = 0.45


def step_seconds(tasks: int, group: int, informative: float, max_turns: int, u: UnitCosts) -> float:
    turns = min(u.turns, max_turns)
    return tasks * group * turns * (u.turn_s + informative * u.decision_s)


def eval_seconds(episodes: int, max_turns: int, u: UnitCosts) -> float:
    return episodes * max_turns * u.turn_s  # greedy held-out episodes mostly fail: all turns


# -- statistics ---------------------------------------------------------------------------------


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (sound at 0/n and n/n, unlike the normal one)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


def auc(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Trapezoid area under (xs, ys) divided by the x range: the mean success over training."""
    if len(xs) < 2:
        return ys[0] if ys else float("nan")
    area = sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))
    return area / (xs[-1] - xs[0])


def paired_bootstrap(
    a: dict[str, Sequence[float]], b: dict[str, Sequence[float]], draws: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95% percentile interval, resampling tasks (each task keeps all its
    seeds' outcomes in both conditions, so the pairing survives). a, b: task id -> outcomes."""
    tasks = sorted(set(a) & set(b))
    if not tasks:
        return (float("nan"), float("nan"), float("nan"))
    diffs = [(sum(a[t]) - sum(b[t]), len(a[t])) for t in tasks]

    def mean_diff(sample):
        return sum(d for d, _ in sample) / sum(n for _, n in sample)

    rng = random.Random(seed)
    stats = sorted(mean_diff([diffs[rng.randrange(len(diffs))] for _ in diffs]) for _ in range(draws))
    return (mean_diff(diffs), stats[int(0.025 * draws)], stats[int(0.975 * draws) - 1])


def detectable_difference(p: float, n: int) -> float:
    """Smallest difference of two proportions near p, n episodes each, that a two-sided test at 5%
    finds with 80% power (unpaired, so pairing makes the real design somewhat more sensitive)."""
    p = min(max(p, 0.02), 0.98)
    return (1.96 + 0.84) * math.sqrt(2 * p * (1 - p) / n)


# -- runs -----------------------------------------------------------------------------------------


def read_run(run_dir: Path) -> dict:
    """Step metrics and evaluations from a run's events.jsonl (also of a run still going)."""
    from pats.logging.events import read_events

    path = run_dir / "events.jsonl"
    if not path.is_file():
        return {"steps": [], "evals": []}
    return {
        "steps": [(e["step"], e["metrics"]) for e in read_events(path, "step_end")],
        "evals": [(e["step"] + 1, e["metrics"]) for e in read_events(path, "eval")],  # x: steps done
    }


def finished(run_dir: Path, steps: int) -> bool:
    return any(s == steps - 1 for s, _ in read_run(run_dir)["steps"])


def run_condition(spec_file: str, overrides: Sequence[str], run_dir: Path) -> str:
    """Train one condition in run_dir through pats' own train(): 'skipped' when it already finished,
    'resumed' after an interruption, 'ran' when started fresh."""
    from pats.engine.run import new_run, resume, train
    from pats.spec import load_spec

    name = run_dir.name
    spec = load_spec(REPO / spec_file, [*overrides, f"name={name}", f"logging.root={run_dir.parent}"])
    if finished(run_dir, spec.trainer.steps):
        return "skipped"
    try:
        if (run_dir / "checkpoints" / "latest.json").is_file():
            resume(run_dir)
            return "resumed"
        shutil.rmtree(run_dir, ignore_errors=True)  # died before its first checkpoint: start over
        asyncio.run(train(spec, new_run(spec)))
        return "ran"
    finally:
        gc.collect()  # the next condition loads its own model


def heldout(
    cache: Path, num_tasks: int, run_dir: Path | None = None, base_spec=None, chunk: int = 32, offset: int = 0
) -> dict:
    """Per-task held-out outcomes without the scaffold of run_dir's last checkpoint, or of the
    untrained policy of base_spec when run_dir is None, on eval tasks [offset, offset + num_tasks).
    Cached in `cache` (redone if the checkpoint changed)."""
    from pats.backends.local.backend import LocalBackend
    from pats.engine.run import load_run, make_env_factory
    from pats.types import EMPTY_VIEW

    spec, state = load_run(run_dir) if run_dir else (base_spec, None)
    if offset:  # the i-th eval task is the fold's i-th seed whatever the count, so this only extends the list
        env_spec = spec.environment.model_copy(update={"num_eval_tasks": offset + num_tasks})
        spec = spec.model_copy(update={"environment": env_spec})
    step = state.step if state else -1
    if cache.is_file() and json.loads(cache.read_text())["checkpoint_step"] == step:
        return json.loads(cache.read_text())
    make_env = make_env_factory(spec)
    env = make_env()
    tasks = env.tasks("eval")[offset : offset + num_tasks]
    backend = LocalBackend(spec, make_env)
    if state:
        backend.load(Path(state.path))

    async def go():
        out = []
        try:
            for i in range(0, len(tasks), chunk):  # chunks: one environment per live episode
                part = tasks[i : i + chunk]
                out += await backend.evaluate(part, [EMPTY_VIEW] * len(part))
        finally:
            await backend.close()
            await env.close()
        return out

    rollouts = asyncio.run(go())
    result = {
        "checkpoint_step": step,
        "tasks": [r.task_id for r in rollouts],
        "success": [float(r.success) for r in rollouts],
        "reward": [r.reward for r in rollouts],
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result) + "\n")
    return result


def write_result(name: str, result: dict, results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    out = results_dir / f"{name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    return out


def fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"
