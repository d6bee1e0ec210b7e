"""Task lists as verl parquet rows: one row per task, training rows and validation rows.

A row carries the bare prompt (the environment's instructions and the task id; never a scaffold),
`extra_info` with the task (id, type, split and the whole `Task` as JSON, so a loop can reset the
environment without listing tasks again) and `agent_name`, which picks the agent loop: training rows
run `PatsAgentLoop`, validation rows `PatsValidationLoop` (no scaffold, the deployment prompt). With
`eval.with_scaffold` (and a scaffold), every held-out task gets a second validation row run by
`PatsScaffoldValidationLoop` under the current scaffold, its `data_source` `pats/<kind>/with_scaffold`:
verl reports validation per data source, so the two passes sit side by side and their difference is
the reliance gap (`eval/reliance_gap` of the local engine).

The row's prompt is what verl's dataset tools see (length filter, logs); the agent loop renders the
real first prompt from the environment's reset (task description, first observation, admissible
actions), as the local backend does, because that text only exists once a game has started.

`python3 -m pats.backends.verl.data BUNDLE/` writes a bundle's rows from its spec.yaml: a bundle
exported with `--no-data` (on a machine without the games) gets them on the cluster this way, and its
launch script runs it when the files are missing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pats.backends.verl.config import SCAFFOLD_VALIDATION_LOOP, TRAIN_LOOP, VALIDATION_LOOP
from pats.envs.prompting import instructions
from pats.errors import PatsError
from pats.spec.models import ExperimentSpec
from pats.types import Task

TRAIN_FILE, VAL_FILE = "train.parquet", "val.parquet"


def task_rows(
    tasks: Sequence[Task], env_kind: str, validation: bool, with_scaffold: bool = False
) -> list[dict]:
    """verl rows for `tasks`; `validation` picks the loop that never adds a scaffold, `with_scaffold`
    (validation only) the one that plays under the current scaffold."""
    system = instructions(env_kind, "generate")
    loop = (SCAFFOLD_VALIDATION_LOOP if with_scaffold else VALIDATION_LOOP) if validation else TRAIN_LOOP
    return [
        {
            "data_source": f"pats/{env_kind}" + ("/with_scaffold" if with_scaffold else ""),
            "agent_name": loop,
            "prompt": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Task: {task.id}"},
            ],
            "ability": env_kind,
            # verl's validation reads this column; pats rewards come from the environment.
            "reward_model": {"style": "env", "ground_truth": ""},
            "extra_info": {
                "index": index,  # verl groups trajectories for tracing by it
                "task_id": task.id,
                "task_type": task.type,
                "split": task.split,
                "task": task.model_dump_json(),
            },
        }
        for index, task in enumerate(tasks)
    ]


def write_parquet(rows: Sequence[dict], path: Path) -> Path:
    """Write `rows` to `path` whole or not at all (a reader never finds half a file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_task_data(spec: ExperimentSpec, out: Path) -> tuple[Path, Path]:
    """`out/train.parquet` (every training task) and `out/val.parquet` (the held-out tasks
    evaluations play: `eval.first_task` on, `eval.num_tasks` of them). Lists the environment's tasks, so it needs the environment's data (ALFWorld's
    games, a QA set) on this machine."""
    import pats.envs  # noqa: F401  (registers the built-in environments)
    from pats.registry import ENVIRONMENTS

    env = ENVIRONMENTS.get(spec.environment.kind)(spec.environment)
    train, held_out = env.tasks("train"), env.tasks("eval")
    held_out = held_out[spec.eval_tasks()]
    kind = spec.environment.kind
    val = task_rows(held_out, kind, validation=True)
    if spec.eval.with_scaffold and spec.scaffold.mode != "none":
        val += task_rows(held_out, kind, validation=True, with_scaffold=True)
    return (
        write_parquet(task_rows(train, kind, validation=False), out / TRAIN_FILE),
        write_parquet(val, out / VAL_FILE),
    )


def task_of(extra_info: dict) -> Task:
    """The task a row was written for (from `extra_info`, as verl hands it to the loop)."""
    return Task.model_validate_json(extra_info["task"])


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m pats.backends.verl.data BUNDLE/`: the task rows of the bundle's spec.yaml."""
    from pats.spec import load_spec

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python3 -m pats.backends.verl.data BUNDLE/  (a folder from `pats export verl`)")
        return 2
    bundle = Path(args[0])
    try:
        paths = write_task_data(load_spec(bundle / "spec.yaml"), bundle)
    except PatsError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
