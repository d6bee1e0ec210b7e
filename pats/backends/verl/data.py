"""Task lists as verl parquet rows: one row per task, training rows and validation rows.

A row carries the bare prompt (the environment's instructions and the task id; never a scaffold),
`extra_info` with the task (id, type, split and the whole `Task` as JSON, so a loop can reset the
environment without listing tasks again) and `agent_name`, which picks the agent loop: training rows
run `PatsAgentLoop`, validation rows `PatsValidationLoop` (no scaffold, the deployment prompt).

The row's prompt is what verl's dataset tools see (length filter, logs); the agent loop renders the
real first prompt from the environment's reset (task description, first observation, admissible
actions), as the local backend does, because that text only exists once a game has started.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pats.backends.verl.config import TRAIN_LOOP, VALIDATION_LOOP
from pats.envs.prompting import instructions
from pats.types import Task


def task_rows(tasks: Sequence[Task], env_kind: str, validation: bool) -> list[dict]:
    """verl rows for `tasks`; `validation` picks the loop that never adds a scaffold."""
    system = instructions(env_kind, "generate")
    return [
        {
            "data_source": f"pats/{env_kind}",
            "agent_name": VALIDATION_LOOP if validation else TRAIN_LOOP,
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path


def task_of(extra_info: dict) -> Task:
    """The task a row was written for (from `extra_info`, as verl hands it to the loop)."""
    return Task.model_validate_json(extra_info["task"])
