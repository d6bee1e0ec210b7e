"""`pats eval RUN_DIR`: a run's latest policy on held-out tasks, without (and optionally with) the scaffold.

The tasks are played in batches of `trainer.tasks_per_step` (the training step's width), and a line is
printed after each batch, so a long evaluation shows where it is wherever its output goes; the metrics
go to `report/eval_<split>.json` (`eval_path`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pats.engine.run import load_run, make_backend, make_env_factory
from pats.errors import PrerequisiteError
from pats.fileio import write_atomic
from pats.metrics import rollout_metrics
from pats.protocols import PolicyBackend
from pats.types import EMPTY_VIEW, Rollout, ScaffoldView, Task


def eval_path(run_dir: Path, split: str) -> Path:
    """Where `pats eval` writes the metrics of `split`."""
    return run_dir / "report" / f"eval_{split}.json"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _in_batches(
    backend: PolicyBackend,
    tasks: Sequence[Task],
    views: Sequence[ScaffoldView],
    size: int,
    label: str,
    say: Callable[[str], None],
) -> list[Rollout]:
    """`backend.evaluate` over `tasks` in batches of `size` tasks, one progress line per batch."""
    rollouts: list[Rollout] = []
    started = time.monotonic()
    for i in range(0, len(tasks), size):
        rollouts += await backend.evaluate(tasks[i : i + size], views[i : i + size])
        won = sum(r.success for r in rollouts)
        say(
            f"eval {label}: {min(i + size, len(tasks))}/{len(tasks)} tasks, {won}/{len(rollouts)} "
            f"episodes won so far ({time.monotonic() - started:.0f} s)"
        )
    return rollouts


async def _evaluate(
    run_dir: Path, split: str, num_tasks: int | None, with_scaffold: bool, say: Callable[[str], None]
) -> dict[str, float]:
    spec, state = load_run(run_dir)
    if state is None:
        raise PrerequisiteError(f"{run_dir} has no checkpoint yet; train first (pats run ...)")
    make_env = make_env_factory(spec)
    env = make_env()
    tasks = env.tasks(split)[: num_tasks or spec.eval.num_tasks or spec.environment.num_eval_tasks]
    backend = make_backend(spec, make_env)
    backend.load(Path(state.path))
    size = spec.trainer.tasks_per_step
    say(f"evaluating the checkpoint after step {state.step} on {len(tasks)} {split} tasks")
    try:
        bare = await _in_batches(backend, tasks, [EMPTY_VIEW] * len(tasks), size, "no scaffold", say)
        metrics = rollout_metrics(bare, "eval")
        if with_scaffold:
            from pats.models import token_counter
            from pats.scaffold import ScaffoldStore

            store = ScaffoldStore.open(
                run_dir / "scaffold", token_counter(spec.policy.model), spec.scaffold.budget.view_tokens
            )
            views = [store.pin(t) for t in tasks]
            scaffolded = await _in_batches(backend, tasks, views, size, "with scaffold", say)
            metrics |= rollout_metrics(scaffolded, "eval_with_scaffold")
    finally:
        await backend.close()
        await env.close()
    metrics["eval/tasks"] = float(len(tasks))
    metrics["eval/checkpoint_step"] = float(state.step)
    (run_dir / "report").mkdir(exist_ok=True)
    write_atomic(eval_path(run_dir, split), json.dumps(metrics, indent=1))
    return metrics


def evaluate_run(
    run_dir: Path,
    split: str = "eval",
    num_tasks: int | None = None,
    with_scaffold: bool = False,
    say: Callable[[str], None] = _say,
) -> dict[str, float]:
    """The metrics (also written to `eval_path(run_dir, split)`); `say` gets the progress lines."""
    return asyncio.run(_evaluate(run_dir, split, num_tasks, with_scaffold, say))
