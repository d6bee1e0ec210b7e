"""Seeded task sampling: the tasks of step t depend only on (seed, t).

No sampler state carries from one step to the next, so a resumed run draws exactly what the
uninterrupted run would have, and two conditions with the same seed train on paired task draws
(the comparison the benchmarks need).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pats.types import Task


class TaskSampler:
    def __init__(self, tasks: Sequence[Task], per_step: int, seed: int):
        if not tasks:
            raise ValueError("the environment listed no training tasks")
        self.tasks = list(tasks)
        self.per_step = min(per_step, len(self.tasks))
        self.seed = seed

    def sample(self, step: int) -> list[Task]:
        rng = random.Random(f"{self.seed}:{step}")  # str seeds hash stably across processes
        return rng.sample(self.tasks, self.per_step)
