"""The response-likelihood gap: how much the policy still leans on the scaffold (score mode).

On a fixed set of expert (state, action) pairs, replayed once from the training tasks' expert plans
(kept only when the replay wins the game), the gap is the mean NLL of the expert action under the
policy's own action distribution (softmax over the admissible actions at the policy temperature)
without the scaffold minus with it. Positive: the guidance makes the expert's actions more likely; it
shrinks as the policy needs the guidance less (the PATS paper reports 0.117 -> 0.072, the small-scale
reproduction 0.84 -> 0.26 under removal; notes/anchors.md). It moves long before success does.

Departure from the reproduction: it scores the expert actions of several training tasks per family
rather than one trace per family, and its prompts are pats' own (instructions, history window,
admissible actions), the same as the policy acts on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pats.backends.local.grpo import action_distribution
from pats.episode import Episode
from pats.errors import EnvironmentFault
from pats.protocols import Env, StepResult
from pats.types import EMPTY_VIEW, ScaffoldView, Task

if TYPE_CHECKING:
    from torch import Tensor

    from pats.backends.local.backend import LocalBackend


@dataclass(frozen=True)
class ExpertPair:
    """One expert decision: the state and history the policy would see, and the expert's action."""

    task: Task
    state: StepResult
    history: tuple[tuple[str, str], ...]
    action: str


async def expert_pairs(env: Env, tasks: Sequence[Task]) -> list[ExpertPair]:
    """Every decision of each task's expert plan, for the tasks whose replayed plan wins. A task whose
    replay meets an environment fault is left out (the next reset restarts the environment)."""
    out: list[ExpertPair] = []
    for task in tasks:
        try:
            out += await _replay(env, task)
        except EnvironmentFault as err:
            print(f"note: expert replay of {task.id} left out of the likelihood gap: {err}", file=sys.stderr)
    return out


async def _replay(env: Env, task: Task) -> list[ExpertPair]:
    plan = list(env.expert_plan(task) or [])
    history: list[tuple[str, str]] = []
    state, pairs, won = await env.reset(task), [], False
    for action in plan:
        if action not in state.admissible:
            break
        pairs.append(ExpertPair(task, state, tuple(history), action))
        state = await env.step(action)
        history.append((action, state.observation))  # as the backend keeps its history
        won = won or state.won
    return pairs if won else []


def action_distributions(
    backend: LocalBackend, pairs: Sequence[ExpertPair], views: Sequence[ScaffoldView]
) -> list[Tensor]:
    """Each pair's distribution over its admissible actions (in `pair.state.admissible`'s order), with
    the pair's view in the prompt the backend would act on (score mode), scored as a rollout's turn is
    (`LocalPolicy.decision_scores`: in one batch with `trainer.rollout_batching`, else one by one)."""
    episodes = [
        Episode(f"gap-{i}", pair.task, view, state=pair.state, history=list(pair.history))
        for i, (pair, view) in enumerate(zip(pairs, views, strict=True))
    ]
    actions = [list(pair.state.admissible) for pair in pairs]
    prompts = [
        backend.policy.chat_split(*backend.prompt_parts(ep, acts))
        for ep, acts in zip(episodes, actions, strict=True)
    ]
    scores = backend.policy.decision_scores(prompts, actions)
    return [action_distribution(s.double(), backend.spec.policy.temperature) for s in scores]


def expert_nll(
    backend: LocalBackend, pairs: Sequence[ExpertPair], views: Sequence[ScaffoldView]
) -> list[float]:
    """NLL of each pair's expert action under the policy's action distribution, with the pair's view
    in the prompt the backend would act on (score mode)."""
    return [
        action_nll(probs, list(pair.state.admissible).index(pair.action))
        for pair, probs in zip(pairs, action_distributions(backend, pairs, views), strict=True)
    ]


@dataclass
class LikelihoodGap:
    backend: LocalBackend
    pairs: Sequence[ExpertPair]

    def nll(self, views: Sequence[ScaffoldView]) -> list[float]:
        return expert_nll(self.backend, self.pairs, views)

    def measure(
        self, view_for: Callable[[Task], ScaffoldView] | None, prefix: str = "eval"
    ) -> dict[str, float]:
        """`<prefix>/expert_nll` without the scaffold and, given `view_for` (a run with a scaffold),
        `..._with_scaffold` and `<prefix>/likelihood_gap`."""
        if not self.pairs:
            return {}
        without = self.nll([EMPTY_VIEW] * len(self.pairs))
        a = sum(without) / len(without)
        out = {f"{prefix}/expert_nll": a, f"{prefix}/expert_pairs": float(len(self.pairs))}
        if view_for is not None:
            with_ = self.nll([view_for(p.task) for p in self.pairs])
            b = sum(with_) / len(with_)
            out |= {f"{prefix}/expert_nll_with_scaffold": b, f"{prefix}/likelihood_gap": a - b}
        return out


def action_nll(probs, index: int) -> float:
    return -math.log(max(float(probs[index]), 1e-12))
