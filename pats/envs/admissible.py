"""Shared by the environments that list their valid actions (twx, alfworld): matching an action to
the game's spelling, and refusing one that is not admissible without sending it to the game."""

from __future__ import annotations

from pats.envs.prompting import MAX_ACTION_CHARS
from pats.errors import EnvironmentFault
from pats.protocols import StepResult
from pats.types import Task


def normalize(action: str) -> str:
    """Case and whitespace do not make two actions different."""
    return " ".join(action.split()).lower()


def spelling(admissible: tuple[str, ...]) -> dict[str, str]:
    """normalized action -> the game's own spelling of it."""
    return {normalize(action): action for action in admissible}


def check_step(
    task: Task | None, last: StepResult | None, broken: bool, process: str
) -> tuple[Task, StepResult]:
    """Raise what a step cannot follow: a dead game process, no reset yet, an ended episode; else the
    episode's task and last state."""
    if broken:
        raise EnvironmentFault(f"the {process} died during this episode; reset() starts a new one")
    if task is None or last is None:
        raise RuntimeError("step() called before reset()")
    if last.done:
        raise RuntimeError(f"step() called after the episode of {task.id} ended; call reset()")
    return task, last


def rejected(last: StepResult, action: str) -> StepResult:
    """The state as it was (the action never reached the game), marked invalid with the reason."""
    return last.model_copy(update={"reward": 0.0, "valid": False, "invalid_reason": _why(action)})


def _why(action: str) -> str:
    text = " ".join(action.split())
    if not text:
        return "empty action"
    if len(text) > MAX_ACTION_CHARS:
        return f"over-long action ({len(text)} characters, at most {MAX_ACTION_CHARS})"
    shown = text if len(text) <= 80 else text[:77] + "..."
    return f"'{shown}' is not an admissible action here"
