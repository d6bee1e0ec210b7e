"""`in_batches` (pats.engine.batches): every task is played, the last partial batch included, one
progress line per batch (issue 59, item 20)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pats.engine.batches import in_batches


class Counting:
    """A backend that records the tasks of each `evaluate` call and wins every other episode."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    async def evaluate(self, tasks, views):
        assert len(views) == len(tasks), "each task gets its view"
        self.batches.append(list(tasks))
        return [SimpleNamespace(task=t, success=int(t[1:]) % 2 == 0) for t in tasks]


def test_ten_games_in_batches_of_four_play_all_ten():
    tasks = [f"g{i}" for i in range(10)]
    backend, said = Counting(), []
    rollouts = asyncio.run(in_batches(backend, tasks, [None] * 10, 4, "no scaffold", said.append))
    assert [len(b) for b in backend.batches] == [4, 4, 2]
    assert [r.task for r in rollouts] == tasks, "every game once, in order"
    assert [line.split(" (")[0] for line in said] == [
        "eval no scaffold: 4/10 tasks, 2/4 episodes won so far",
        "eval no scaffold: 8/10 tasks, 4/8 episodes won so far",
        "eval no scaffold: 10/10 tasks, 5/10 episodes won so far",
    ]
