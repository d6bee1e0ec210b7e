"""Episodes of many tasks played a batch of tasks at a time (`pats eval`, and a run's own evaluations):
the backend holds an environment per episode in flight, so the batch bounds them (ExperimentSpec.eval_batch)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pats.protocols import PolicyBackend
from pats.types import Rollout, ScaffoldView, Task


async def in_batches(
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
