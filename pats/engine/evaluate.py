"""`pats eval RUN_DIR`: a run's latest policy on held-out tasks, without (and optionally with) the scaffold.

The tasks are played in batches of `trainer.tasks_per_step` (the training step's width), and a line is
printed after each batch, so a long evaluation shows where it is wherever its output goes; the metrics
go to `report/eval_<split>.json` (`eval_path`), each game's outcomes to `report/outcomes_<split>.json`
(`outcomes_path`, read by `pats compare`).

`play_heldout` is the one held-out evaluation: `pats eval` plays it on a run's checkpoint, and the
benchmarks (bench/common.py `heldout`) on a checkpoint or the untrained policy, keeping per-task outcomes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pats.engine.batches import in_batches
from pats.engine.run import Checkpoint, load_run, make_backend, make_env_factory
from pats.errors import PrerequisiteError, SpecError
from pats.fileio import write_atomic
from pats.metrics import rollout_metrics, task_outcomes
from pats.spec import ExperimentSpec
from pats.types import EMPTY_VIEW, Record, Rollout, Task


def eval_path(run_dir: Path, split: str) -> Path:
    """Where `pats eval` writes the metrics of `split`."""
    return run_dir / "report" / f"eval_{split}.json"


def outcomes_path(run_dir: Path, split: str) -> Path:
    """Where `pats eval` writes each game's outcomes of `split` (an `EvalOutcomes`)."""
    return run_dir / "report" / f"outcomes_{split}.json"


class EvalOutcomes(Record):
    """Each game's outcomes (1.0 won, 0.0 not) of one `pats eval`: `pats compare` takes them in place of
    the run's last evaluation during training when they measured the run's final checkpoint."""

    checkpoint_step: int
    split: str
    outcomes: dict[str, tuple[float, ...]]  # without the scaffold
    outcomes_with_scaffold: dict[str, tuple[float, ...]] = {}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class HeldOut:
    """Held-out episodes of one policy, in task order: without the scaffold, and with each task's
    pinned scaffold view when one was asked for."""

    tasks: tuple[Task, ...]
    bare: tuple[Rollout, ...]
    scaffolded: tuple[Rollout, ...] | None = None


async def play_heldout(
    spec: ExperimentSpec,
    checkpoint: Checkpoint | None,
    split: str,
    first: int,
    count: int,
    batch: int,
    say: Callable[[str], None],
    scaffold_dir: Path | None = None,
    env_factory: Callable[[ExperimentSpec], Callable[[], Any]] | None = None,
    backend_for: Callable[[ExperimentSpec, Callable[[], Any]], Any] | None = None,
) -> HeldOut:
    """The policy of `checkpoint` (None: `spec`'s untrained policy) on `split` tasks [first,
    first + count), `batch` tasks at a time (one environment per live episode), without the scaffold
    and, given a run's scaffold folder, again with each task's pinned view. `say` gets a line before
    and one per batch. The split is listed as large as asked (not capped at the spec's
    num_eval_tasks); a split smaller than that is refused with its size. The environment factory and
    backend are the spec's unless given (tests pass fakes)."""
    spec = _fold_of_at_least(spec, split, first + count)
    make_env = (env_factory or make_env_factory)(spec)
    env = make_env()
    try:
        tasks = env.tasks(split)[first : first + count]
    except SpecError as err:  # the fold is smaller than the size asked for (e.g. TextWorldExpress's 1000)
        await env.close()
        raise PrerequisiteError(f"cannot list {first + count} {split} tasks: {err}") from None
    if len(tasks) < count:
        await env.close()
        raise PrerequisiteError(
            f"the {split} split of {spec.environment.kind} has {first + len(tasks)} tasks, fewer than the "
            f"{first + count} asked for; ask for at most {len(tasks)} (pats eval --tasks)"
        )
    backend = (backend_for or make_backend)(spec, make_env)
    if checkpoint is not None:
        backend.load(Path(checkpoint.path))
    who = f"the checkpoint after step {checkpoint.step}" if checkpoint else "the untrained policy"
    say(f"evaluating {who} on {len(tasks)} {split} tasks")
    scaffolded = None
    try:
        bare = await in_batches(backend, tasks, [EMPTY_VIEW] * len(tasks), batch, "no scaffold", say)
        if scaffold_dir is not None:
            from pats.models import token_counter
            from pats.scaffold import ScaffoldStore

            store = ScaffoldStore.open(
                scaffold_dir, token_counter(spec.policy.model), spec.scaffold.budget.view_tokens
            )
            views = [store.pin(t) for t in tasks]
            scaffolded = tuple(await in_batches(backend, tasks, views, batch, "with scaffold", say))
    finally:
        await backend.close()
        await env.close()
    return HeldOut(tuple(tasks), tuple(bare), scaffolded)


def _fold_of_at_least(spec: ExperimentSpec, split: str, count: int) -> ExperimentSpec:
    """`spec` with its environment listing at least `count` tasks of `split` (the fold's first ones are
    the same whatever the size): the environment caps a split at num_train_tasks / num_eval_tasks,
    which a larger evaluation than training's would otherwise be cut to."""
    field = "num_train_tasks" if split == "train" else "num_eval_tasks"
    if getattr(spec.environment, field) >= count:
        return spec
    environment = spec.environment.model_copy(update={field: count})
    return spec.model_copy(update={"environment": environment})


async def _evaluate(
    run_dir: Path,
    split: str,
    num_tasks: int | None,
    first_task: int | None,
    with_scaffold: bool,
    say: Callable[[str], None],
) -> dict[str, float]:
    spec, state = load_run(run_dir)
    if state is None:
        raise PrerequisiteError(f"{run_dir} has no checkpoint yet; train first (pats run ...)")
    played = spec.eval_tasks()  # the run's own evaluations' tasks: the defaults on the eval split
    if first_task is None:
        first_task = played.start if split == "eval" else 0
    count = num_tasks or played.stop - played.start
    scaffold_dir = run_dir / "scaffold" if with_scaffold else None
    held = await play_heldout(spec, state, split, first_task, count, spec.eval_batch(), say, scaffold_dir)
    metrics = rollout_metrics(held.bare, "eval")
    scaffolded = {k: tuple(v) for k, v in task_outcomes(held.scaffolded or ()).items()}
    if held.scaffolded is not None:
        metrics |= rollout_metrics(held.scaffolded, "eval_with_scaffold")
    else:  # what this evaluation did not play stays as an earlier one of the same checkpoint left it
        kept = _with_scaffold_before(run_dir, split, state.step)
        if kept is not None:
            scaffolded, before = kept
            metrics |= before
            say(
                "kept the with-scaffold results of the earlier `pats eval` of this checkpoint "
                f"({len(scaffolded)} tasks)"
            )
    metrics["eval/tasks"] = float(len(held.tasks))
    metrics["eval/checkpoint_step"] = float(state.step)
    (run_dir / "report").mkdir(exist_ok=True)
    write_atomic(eval_path(run_dir, split), json.dumps(metrics, indent=1))
    by_game = EvalOutcomes(
        checkpoint_step=state.step,
        split=split,
        outcomes={k: tuple(v) for k, v in task_outcomes(held.bare).items()},
        outcomes_with_scaffold=scaffolded,
    )
    write_atomic(outcomes_path(run_dir, split), by_game.model_dump_json(indent=1))
    return metrics


def _with_scaffold_before(
    run_dir: Path, split: str, step: int
) -> tuple[dict[str, tuple[float, ...]], dict[str, float]] | None:
    """The with-scaffold outcomes and metrics an earlier `pats eval` of `split` wrote for the checkpoint
    of `step`; None when there are none (none written, of another checkpoint, or played without it)."""
    path = outcomes_path(run_dir, split)
    if not path.is_file():
        return None
    before = EvalOutcomes.model_validate_json(path.read_text(encoding="utf-8"))
    if before.checkpoint_step != step or not before.outcomes_with_scaffold:
        return None
    metrics_file = eval_path(run_dir, split)
    old = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    kept = {k: float(v) for k, v in old.items() if k.startswith("eval_with_scaffold/")}
    return dict(before.outcomes_with_scaffold), kept


def evaluate_run(
    run_dir: Path,
    split: str = "eval",
    num_tasks: int | None = None,
    with_scaffold: bool = False,
    say: Callable[[str], None] = _say,
    first_task: int | None = None,
) -> dict[str, float]:
    """The metrics (also written to `eval_path(run_dir, split)`); `say` gets the progress lines. The
    tasks are the run's own evaluations' (`eval.first_task`, `eval.num_tasks`) unless given."""
    return asyncio.run(_evaluate(run_dir, split, num_tasks, first_task, with_scaffold, say))
