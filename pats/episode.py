"""One episode, the same for every trainer: the policy's output becomes an action, the environment
steps, each turn becomes a `Turn`, and the finished episode a `Rollout`.

The local backend (pats.backends.local.backend) and verl's agent loop (pats.backends.verl.loop) both
play their episodes through `Episode`; they differ only in how the policy acts (scored candidates or
batched `generate` there, verl's rollout server here) and how an environment is called (directly, or
on its own thread under verl).

Rules kept here, once: an output that names no admissible action is an invalid turn that does not
reach the environment (free-text environments, `parses_output`, receive the whole output and judge
it themselves); an environment that fails ends the episode with its error; episode reward is the sum
of step rewards and success the environment's `won`; an environment that leaves the admissible
actions out of a step keeps the previous ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pats.envs.prompting import parse_action
from pats.errors import EnvironmentFault
from pats.protocols import StepResult
from pats.types import Rollout, ScaffoldView, Task, Turn


@dataclass(frozen=True)
class Act:
    """What the policy did on one turn."""

    action: str  # what the environment receives (the parsed action)
    output: str  # the policy's text
    valid: bool = True
    reason: str = ""  # why the output is not a valid action
    prompt_tokens: int = 0
    response_tokens: int = 0


def read_output(
    text: str,
    admissible: list[str] | None,
    parses_output: bool,
    prompt_tokens: int = 0,
    response_tokens: int = 0,
) -> Act:
    """The policy's text as an action: the whole output for a free-text environment, else the
    admissible action it names (`parse_action`)."""
    if parses_output:
        return Act(text.strip(), text, prompt_tokens=prompt_tokens, response_tokens=response_tokens)
    action, valid, reason = parse_action(text, admissible)
    return Act(action, text, valid, reason, prompt_tokens, response_tokens)


@dataclass
class Episode:
    id: str
    task: Task
    view: ScaffoldView
    state: StepResult | None = None
    history: list[tuple[str, str]] = field(default_factory=list)  # (action, observation) per turn
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    done: bool = False
    error: str = ""

    @property
    def current(self) -> StepResult:
        """The state the policy acts on (the episode was reset)."""
        assert self.state is not None, "reset the episode first"
        return self.state

    async def reset(self, reset: Callable[[Task], Awaitable[StepResult]]) -> None:
        try:
            self.state = await reset(self.task)
        except EnvironmentFault as err:
            self.state = StepResult(observation="")
            self.done, self.error = True, f"reset failed: {err}"

    async def step(self, act: Act, step: Callable[[str], Awaitable[StepResult]]) -> None:
        """Play one turn: the environment acts on a valid action; the turn is recorded either way."""
        assert self.state is not None, "reset the episode first"
        before = self.state
        if act.valid:
            try:
                result = await step(act.action)
            except EnvironmentFault as err:
                self.done, self.error = True, f"environment died: {err}"
                result = StepResult(observation=before.observation, valid=False, invalid_reason=str(err))
        else:
            result = StepResult(
                observation=before.observation,
                admissible=before.admissible,
                valid=False,
                invalid_reason=act.reason,
            )
        self.turns.append(
            Turn(
                observation=before.observation,
                action=act.action,
                output=act.output,
                valid=result.valid,
                invalid_reason=result.invalid_reason,
                reward=result.reward,
                prompt_tokens=act.prompt_tokens,
                response_tokens=act.response_tokens,
            )
        )
        self.history.append((act.action or act.output[:80], result.observation))
        self.reward += result.reward
        self.won = self.won or result.won
        self.done = self.done or result.done
        if not result.admissible:  # an env may leave them out of an invalid or final step
            result = result.model_copy(update={"admissible": before.admissible})
        self.state = result

    def actions_taken(self) -> list[str]:
        """The actions the environment accepted, in order (what `scaffold.plan_view` marks done): the
        valid turns' actions, after the actions of a history the episode started from (an expert
        state replayed for the likelihood gap has a history and no turns; its actions were accepted)."""
        before = [action for action, _ in self.history[: len(self.history) - len(self.turns)]]
        return before + [t.action for t in self.turns if t.valid]

    def record(self, scaffolded: bool) -> Rollout:
        return Rollout(
            id=self.id,
            task_id=self.task.id,
            scaffolded=scaffolded,
            scaffold_version=self.view.version,
            turns=tuple(self.turns),
            reward=self.reward,
            success=self.won,
            truncated=not self.done,
            error=self.error,
        )
