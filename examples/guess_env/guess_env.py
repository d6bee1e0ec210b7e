"""An environment from another package: pick the box that holds the key.

Everything pats needs to know about it is here: the spec section (its fields, instructions, turn size,
whether it has expert plans) and the factory registered under the same kind. The package's entry point
(`pats.environments`, name `guess`) names the section; pats imports this module when it builds the spec
union, which also registers the factory.
"""

from __future__ import annotations

import random
from typing import ClassVar, Literal

from pydantic import Field

from pats.protocols import StepResult
from pats.registry import ENVIRONMENTS
from pats.spec.environments import EnvironmentSection
from pats.types import Task

COLOURS = ("red", "blue", "green", "yellow", "white", "black")


class GuessEnvSpec(EnvironmentSection):
    """Boxes of several colours; one holds the key. Open boxes until you find it."""

    INSTRUCTIONS: ClassVar[str] = (
        "You are in a room with closed boxes; one holds a key. Each turn open one box. The task ends "
        "when you find the key."
    )
    TURN_TOKENS: ClassVar[int] = 60

    kind: Literal["guess"] = "guess"
    boxes: int = Field(3, ge=2, le=len(COLOURS), description="Boxes in the room.")
    max_turns: int = Field(3, ge=1, le=20)
    num_train_tasks: int = Field(50, ge=1)
    num_eval_tasks: int = Field(20, ge=1)


class GuessEnv:
    parses_output = False

    def __init__(self, spec: GuessEnvSpec):
        self.spec = spec
        self.key = ""

    def tasks(self, split: str) -> list[Task]:
        count = self.spec.num_train_tasks if split == "train" else self.spec.num_eval_tasks
        first = 0 if split == "train" else 10_000
        return [
            Task(id=f"guess:{split}:{i}", type="guess", split=split, env="guess", payload={"seed": first + i})
            for i in range(count)
        ]

    def _boxes(self) -> tuple[str, ...]:
        return tuple(f"open {c} box" for c in COLOURS[: self.spec.boxes])

    async def reset(self, task: Task) -> StepResult:
        colours = COLOURS[: self.spec.boxes]
        self.key = random.Random(task.payload["seed"]).choice(colours)
        hint = (
            f"A note on the door says the key is not in the {colours[0]} box."
            if self.key != colours[0]
            else ""
        )
        return StepResult(
            observation=f"You see {len(colours)} closed boxes. {hint}".strip(),
            admissible=self._boxes(),
            task_description="Find the key.",
        )

    async def step(self, action: str) -> StepResult:
        if action == f"open {self.key} box":
            return StepResult(observation="You found the key!", reward=1.0, done=True, won=True, score=1.0)
        return StepResult(observation="The box is empty.", admissible=self._boxes())

    def expert_plan(self, task: Task) -> list[str] | None:
        colours = COLOURS[: self.spec.boxes]
        return [f"open {random.Random(task.payload['seed']).choice(colours)} box"]

    async def close(self) -> None:
        pass


@ENVIRONMENTS.register("guess")
def make(spec: GuessEnvSpec) -> GuessEnv:
    return GuessEnv(spec)
