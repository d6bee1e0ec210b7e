"""Extension points: environments, policy backends, judges, revisers, metric sinks.

Protocols, not base classes: implement the methods and register the factory by name in
`pats.registry` (no inheritance chains). Records passed between them live in `pats.types`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pats.types import (
    Assessment,
    Edit,
    EvidenceCard,
    LLMUsage,
    Record,
    Refinement,
    Rollout,
    RolloutGroup,
    ScaffoldEntry,
    ScaffoldVersion,
    ScaffoldView,
    Task,
    UpdateStats,
)

TokenCounter = Callable[[str], int]  # the policy tokenizer's count of a text


class StepResult(Record):
    """What an environment returns after reset and after each action."""

    observation: str
    reward: float = 0.0  # reward of this step (not cumulative)
    done: bool = False
    won: bool = False
    score: float = 0.0  # the game's own progress score in [0, 1], where it has one
    admissible: tuple[str, ...] = ()  # actions the environment accepts now, where it knows them
    valid: bool = True  # False when the last action was rejected
    invalid_reason: str = ""
    task_description: str = ""


@runtime_checkable
class Env(Protocol):
    """One episode at a time; a backend makes one instance per concurrent episode.

    An environment whose actions are free text (a search query, an answer) sets the class attribute
    `parses_output = True`: `step` then receives the policy's whole output and reports a malformed one
    as an invalid step (valid=False, invalid_reason); the others (`parses_output = False`) receive one
    admissible action.
    """

    parses_output: bool

    def tasks(self, split: str) -> list[Task]: ...

    async def reset(self, task: Task) -> StepResult: ...

    async def step(self, action: str) -> StepResult: ...

    def expert_plan(self, task: Task) -> list[str] | None: ...

    async def close(self) -> None: ...


class GroupPlan(Record):
    """One rollout group to play: `size` rollouts of `task`, the first `probes` without scaffold."""

    task: Task
    view: ScaffoldView
    size: int
    probes: int = 0


T = TypeVar("T")


@dataclass(frozen=True)
class Played(Generic[T]):
    """One rollout group as a backend played it: the group (what the review, the metrics and the event
    log read) and, per rollout in the group's order, what that backend's update needs of it (the local
    backend's scored or generated turns; opaque to the engine, which hands it back to `update`)."""

    group: RolloutGroup
    training: tuple[T, ...] = ()


@runtime_checkable
class PolicyBackend(Protocol):
    async def rollout(self, step: int, plans: Sequence[GroupPlan]) -> list[Played]: ...

    async def update(self, played: Sequence[Played]) -> UpdateStats:
        """One policy update on the groups `rollout` returned (those the engine keeps, see
        `trainer.on_env_fault`), their advantages from the groups' rewards."""
        ...

    async def evaluate(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...

    async def close(self) -> None:
        """Release what the backend holds (environments, processes); `pats run` calls it at the end."""
        ...


@runtime_checkable
class Judge(Protocol):
    """Picks a review mode per task type (and, for the LLM judge, grades entries)."""

    async def assess(
        self,
        step: int,
        groups: Sequence[RolloutGroup],
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
    ) -> list[Assessment]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def usage(self) -> LLMUsage:
        """LLM calls, latency, faults and budget cut-offs so far (zeros where it calls no LLM)."""
        ...


@runtime_checkable
class Reviser(Protocol):
    """Turns one task type's assessment, its cards and the current entries into edits."""

    async def revise(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
        feedback: Sequence[str] = (),  # validation errors of a refused first attempt
    ) -> list[Edit]: ...

    def usage(self) -> LLMUsage:
        """LLM calls, latency and faults so far (zeros where it calls no LLM)."""
        ...


@runtime_checkable
class RefiningReviser(Reviser, Protocol):
    """A reviser that checks its own answers with the review's check (`check`, given when it was
    built) and asks again with the problems (the LLM reviser's DSPy program); the review then asks it
    once per type and step, and logs each refused answer of the `Refinement`."""

    check: Any

    async def refine(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
    ) -> Refinement: ...


@runtime_checkable
class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def scaffold(self, step: int, version: ScaffoldVersion) -> None:
        """A new scaffold version, after the step's metrics (W&B: a table of its entries)."""
        ...

    def close(self) -> None: ...
