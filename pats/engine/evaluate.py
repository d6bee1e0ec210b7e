"""`pats eval RUN_DIR`: a run's latest policy on held-out tasks, without (and optionally with) the scaffold."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pats.engine.run import load_run, make_backend, make_env_factory
from pats.errors import PrerequisiteError
from pats.fileio import write_atomic
from pats.metrics import rollout_metrics
from pats.types import EMPTY_VIEW


async def _evaluate(
    run_dir: Path, split: str, num_tasks: int | None, with_scaffold: bool
) -> dict[str, float]:
    spec, state = load_run(run_dir)
    if state is None:
        raise PrerequisiteError(f"{run_dir} has no checkpoint yet; train first (pats run ...)")
    make_env = make_env_factory(spec)
    env = make_env()
    tasks = env.tasks(split)[: num_tasks or spec.eval.num_tasks or spec.environment.num_eval_tasks]
    backend = make_backend(spec, make_env)
    backend.load(Path(state.path))
    try:
        metrics = rollout_metrics(await backend.evaluate(tasks, [EMPTY_VIEW] * len(tasks)), "eval")
        if with_scaffold:
            from pats.models import token_counter
            from pats.scaffold import ScaffoldStore

            store = ScaffoldStore.open(
                run_dir / "scaffold", token_counter(spec.policy.model), spec.scaffold.budget.view_tokens
            )
            views = [store.pin(t) for t in tasks]
            metrics |= rollout_metrics(await backend.evaluate(tasks, views), "eval_with_scaffold")
    finally:
        await backend.close()
        await env.close()
    metrics["eval/tasks"] = float(len(tasks))
    metrics["eval/checkpoint_step"] = float(state.step)
    (run_dir / "report").mkdir(exist_ok=True)
    write_atomic(run_dir / "report" / f"eval_{split}.json", json.dumps(metrics, indent=1))
    return metrics


def evaluate_run(
    run_dir: Path, split: str = "eval", num_tasks: int | None = None, with_scaffold: bool = False
) -> dict[str, float]:
    return asyncio.run(_evaluate(run_dir, split, num_tasks, with_scaffold))
