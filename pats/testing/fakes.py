"""Test doubles for pats' own tests and for users testing their components.

- `FakeEnv`: a tiny deterministic text environment behind the `Env` protocol (walk a short gold path).
- `ScriptedBackend`: a `PolicyBackend` without a model. Each rollout succeeds with a probability
  given by a schedule of (number of updates so far, task, view), so tests can script a policy that
  fails, is helped by guidance, and improves. Successful rollouts follow the task's gold path; failed
  ones repeat an action until they run out of turns, which gives the cards something to find.
- `RaisingJudge`: a judge that raises at chosen steps (a run's failure policy under test).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from pats.protocols import GroupPlan, Played, StepResult
from pats.types import EMPTY_VIEW, Rollout, RolloutGroup, ScaffoldView, Task, Turn, UpdateStats

ROOMS = ("kitchen", "hall", "garden", "cellar", "attic")
ITEMS = ("key", "lamp", "coin", "book", "map")


class FakeEnv:
    """Tasks of two types: `fetch` (take an item in a room) and `open` (unlock the door)."""

    parses_output = False  # step() receives one admissible action

    def __init__(self, num_tasks: int = 8, max_turns: int = 6):
        self.num_tasks, self.max_turns = num_tasks, max_turns
        self._task: Task | None = None
        self._progress = 0

    def tasks(self, split: str) -> list[Task]:
        offset = 0 if split == "train" else 1000
        return [self._make(split, offset + i) for i in range(self.num_tasks)]

    def _make(self, split: str, seed: int) -> Task:
        kind = "fetch" if seed % 2 == 0 else "open"
        return Task(id=f"fake:{split}:{seed}", type=kind, split=split, env="fake", payload={"seed": seed})

    def expert_plan(self, task: Task) -> list[str]:
        seed = task.payload["seed"]
        room, item = ROOMS[seed % len(ROOMS)], ITEMS[(seed // 2) % len(ITEMS)]
        if task.type == "fetch":
            return [f"go to {room}", f"take {item}"]
        return [f"go to {room}", f"take {item}", "unlock door"]

    @property
    def task(self) -> Task:
        """The task of the episode in play."""
        assert self._task is not None, "reset the environment first"
        return self._task

    def _admissible(self) -> tuple[str, ...]:
        plan = self.expert_plan(self.task)
        return tuple(sorted({"look", "inventory", *plan}))

    async def reset(self, task: Task) -> StepResult:
        self._task, self._progress = task, 0
        return StepResult(
            observation="You are in the hall.",
            admissible=self._admissible(),
            task_description=f"Task {task.id}: {task.type}",
        )

    async def step(self, action: str) -> StepResult:
        plan = self.expert_plan(self.task)
        if action not in self._admissible():
            return StepResult(
                observation="Nothing happens.",
                valid=False,
                invalid_reason="not admissible",
                admissible=self._admissible(),
            )
        if self._progress < len(plan) and action == plan[self._progress]:
            self._progress += 1
        won = self._progress == len(plan)
        return StepResult(
            observation=f"You did: {action}.",
            reward=1.0 if won else 0.0,
            done=won,
            won=won,
            score=self._progress / len(plan),
            admissible=self._admissible(),
        )

    async def close(self) -> None:
        return None


Schedule = Callable[[int, Task, ScaffoldView], float]


def improving_schedule(start: float = 0.05, gain: float = 0.04, guidance_bonus: float = 0.45) -> Schedule:
    """Success probability that grows with updates, plus a bonus when the view holds guidance that
    names this task's gold actions (what a useful scaffold entry does)."""

    def schedule(updates: int, task: Task, view: ScaffoldView) -> float:
        env = FakeEnv()
        helped = bool(view.text) and all(a in view.text for a in env.expert_plan(task))
        return min(1.0, start + gain * updates + (guidance_bonus if helped else 0.0))

    return schedule


class ScriptedBackend:
    def __init__(self, schedule: Schedule, seed: int = 0, max_turns: int = 6, update_delay: float = 0.0):
        self.schedule, self.max_turns, self.update_delay = schedule, max_turns, update_delay
        self.rng = random.Random(seed)
        self.env = FakeEnv(max_turns=max_turns)
        self.updates = 0
        self.seen_views: list[tuple[int, str, str]] = []  # (step, task id, version) per rollout

    def _play(self, rid: str, task: Task, view: ScaffoldView, scaffolded: bool) -> Rollout:
        success = self.rng.random() < self.schedule(self.updates, task, view)
        plan = self.env.expert_plan(task)
        actions = plan if success else [plan[0]] + ["look"] * (self.max_turns - 1)
        turns = tuple(
            Turn(
                observation=f"obs {i}",
                action=a,
                output=a,
                reward=1.0 if success and i == len(actions) - 1 else 0.0,
                prompt_tokens=50 + (view.tokens if scaffolded else 0),
                response_tokens=3,
            )
            for i, a in enumerate(actions)
        )
        return Rollout(
            id=rid,
            task_id=task.id,
            scaffolded=scaffolded,
            scaffold_version=view.version,
            turns=turns,
            reward=float(success),
            success=success,
            truncated=not success,
        )

    async def rollout(self, step: int, plans: Sequence[GroupPlan]) -> list[Played]:
        groups: list[Played] = []
        for plan in plans:
            rollouts = []
            for i in range(plan.size):
                scaffolded = i >= plan.probes
                view = plan.view if scaffolded else EMPTY_VIEW
                self.seen_views.append((step, plan.task.id, view.version))
                rollouts.append(self._play(f"s{step}-{plan.task.id}-{i}", plan.task, view, scaffolded))
            group = RolloutGroup(
                step=step, task=plan.task, scaffold_version=plan.view.version, rollouts=tuple(rollouts)
            )
            groups.append(Played(group))
        return groups

    async def update(self, played: Sequence[Played]) -> UpdateStats:
        if self.update_delay:
            await asyncio.sleep(self.update_delay)
        self.updates += 1
        return UpdateStats(steps=1.0, items=float(sum(len(p.group.rollouts) for p in played)))

    async def evaluate(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]:
        return [self._play(f"eval-{t.id}", t, v, not v.empty) for t, v in zip(tasks, views, strict=True)]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "scripted.txt").write_text(f"{self.updates}\n")

    def load(self, directory: Path) -> None:
        self.updates = int((directory / "scripted.txt").read_text())

    async def close(self) -> None:
        return None  # nothing held: no model, no environment processes


class RaisingJudge:
    """A judge that raises at the given steps, for testing a run's failure policy (pats.step_end): it
    asks `inner` first, so a judge state left half-updated by a failed review would show."""

    def __init__(self, inner, at: Sequence[int]):
        self.inner, self.at = inner, set(at)

    async def assess(self, step, groups, cards, entries):
        out = await self.inner.assess(step, groups, cards, entries)
        if step in self.at:
            raise RuntimeError(f"judge bug at step {step}")
        return out

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state) -> None:
        self.inner.load_state_dict(state)

    def usage(self):
        return self.inner.usage()
