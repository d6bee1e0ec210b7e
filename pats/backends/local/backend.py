"""The local PolicyBackend: batched multi-turn episodes on real environments, GRPO updates.

All episodes of a step advance together, one turn at a time: the policy acts for every live episode
(score mode: all episodes' candidates scored in a few batched passes, each system prompt computed
once per rollout, or one scoring pass per episode; generate mode: one batched `generate` over all of
them), then every environment steps concurrently. `rollout` returns each group with its rollouts'
played turns (`Played.training`: ScoredTurn / GeneratedTurn), and `update` turns them into training
items (ChoiceItem / TrainItem) once the group's rewards give their advantages. Departures from the published setup: episodes are a fresh prompt per turn with a history
window (as verl-agent), not a growing chat; each item is weighted 1 / turns so every episode counts
once in the loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pats.backends.local.grpo import action_distribution, group_advantages
from pats.backends.local.policy import LocalPolicy
from pats.backends.local.reliance import ExpertPair, action_nll
from pats.backends.local.scoring import PrefixStore
from pats.backends.local.training import ChoiceItem, TrainItem
from pats.envs.prompting import instructions, parse_action, render_prompt
from pats.errors import EnvironmentFault
from pats.protocols import Env, GroupPlan, Played, StepResult
from pats.scaffold import with_scaffold
from pats.spec.models import ExperimentSpec
from pats.types import EMPTY_VIEW, Rollout, RolloutGroup, ScaffoldView, Task, Turn


@dataclass(frozen=True)
class ScoredTurn:
    """A score-mode turn as played: the prompt ids, the candidate actions, the one chosen."""

    prompt: tuple[int, ...]
    actions: tuple[str, ...]
    chosen: int


@dataclass(frozen=True)
class GeneratedTurn:
    """A generate-mode turn as played: the prompt ids and the policy's own tokens."""

    prompt: tuple[int, ...]
    response: tuple[int, ...]


StoredTurn = ScoredTurn | GeneratedTurn


@dataclass
class Episode:
    id: str
    task: Task
    view: ScaffoldView
    env: Env
    state: StepResult | None = None
    history: list[tuple[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    items: list[StoredTurn] = field(default_factory=list)  # per turn; the advantage comes in update()
    reward: float = 0.0
    won: bool = False
    done: bool = False
    error: str = ""


class LocalBackend:
    def __init__(self, spec: ExperimentSpec, make_env: Callable[[], Env], policy: LocalPolicy | None = None):
        self.spec = spec
        self.policy = policy or LocalPolicy(spec.policy, spec.trainer, spec.seed)
        self.make_env = make_env
        self.envs: list[Env] = []  # reused across steps: an environment may hold a process (a JVM)
        self.instructions = instructions(spec.environment.kind, spec.policy.action)

    # -- PolicyBackend -------------------------------------------------------------------------

    async def rollout(self, step: int, plans: Sequence[GroupPlan]) -> list[Played[tuple[StoredTurn, ...]]]:
        episodes, shape = [], []
        for plan in plans:
            ids = []
            for i in range(plan.size):
                view = plan.view if i >= plan.probes else EMPTY_VIEW  # probes: no scaffold
                episodes.append((f"s{step}-{plan.task.id}-{i}", plan.task, view))
                ids.append(len(episodes) - 1)
            shape.append((plan, ids))
        finished = await self.play(episodes, greedy=False)
        played = []
        for plan, ids in shape:
            rollouts = tuple(self._record(finished[i], scaffolded=i - ids[0] >= plan.probes) for i in ids)
            group = RolloutGroup(step=step, task=plan.task, scaffold_version=plan.view.version, rollouts=rollouts)
            played.append(Played(group, training=tuple(tuple(finished[i].items) for i in ids)))
        return played

    async def update(self, played: Sequence[Played[tuple[StoredTurn, ...]]]) -> dict[str, float]:
        batch = []
        for p in played:
            rewards = torch.tensor(p.group.rewards, dtype=torch.float64)  # (G,)
            advantages = group_advantages(rewards, self.spec.trainer.normalize_advantage_std)
            for turns, adv in zip(p.training, advantages.tolist(), strict=True):
                batch += [self._train_item(turn, adv, 1.0 / len(turns)) for turn in turns]
        # In a thread: torch releases the GIL, so the scaffold review runs beside the update.
        stats = await asyncio.to_thread(self.policy.update, batch)
        return {f"policy/{k}": float(v) for k, v in stats.items()}

    async def evaluate(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]:
        n = self.spec.eval.samples_per_task
        episodes = [(f"eval-{t.id}-{k}", t, v) for t, v in zip(tasks, views, strict=True) for k in range(n)]
        finished = await self.play(episodes, greedy=self.spec.eval.greedy)
        return [self._record(e, scaffolded=not e.view.empty) for e in finished]

    def expert_nll(self, pairs: Sequence[ExpertPair], views: Sequence[ScaffoldView]) -> list[float]:
        """NLL of each pair's expert action under the policy's action distribution, with the pair's
        view in the prompt (score mode; see reliance.py)."""
        out = []
        for i, (pair, view) in enumerate(zip(pairs, views, strict=True)):
            ep = Episode(f"gap-{i}", pair.task, view, env=None, state=pair.state, history=list(pair.history))
            actions = list(pair.state.admissible)
            scores = self.policy.score_actions(self._prompt_ids(ep, actions), actions).double()
            probs = action_distribution(scores, self.spec.policy.temperature)
            out.append(action_nll(probs, actions.index(pair.action)))
        return out

    def save(self, directory: Path) -> None:
        self.policy.save(directory / "policy")

    def load(self, directory: Path) -> None:
        self.policy.load(directory / "policy")

    async def close(self) -> None:
        await asyncio.gather(*(env.close() for env in self.envs))
        self.envs.clear()

    # -- episodes ------------------------------------------------------------------------------

    async def play(self, specs: Sequence[tuple[str, Task, ScaffoldView]], greedy: bool) -> list[Episode]:
        while len(self.envs) < len(specs):
            self.envs.append(self.make_env())
        episodes = [
            Episode(rid, task, view, env) for (rid, task, view), env in zip(specs, self.envs, strict=False)
        ]
        await asyncio.gather(*(self._reset(e) for e in episodes))
        prefixes = PrefixStore()  # system-prompt keys/values, valid while the weights stay the same
        for _ in range(self.spec.environment.max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            actions = self._act(live, greedy, prefixes)
            await asyncio.gather(*(self._step(e, a) for e, a in zip(live, actions, strict=True)))
        return episodes

    async def _reset(self, ep: Episode) -> None:
        try:
            ep.state = await ep.env.reset(ep.task)
        except EnvironmentFault as err:
            ep.done, ep.error = True, f"reset failed: {err}"

    def _prompt_parts(self, ep: Episode, admissible) -> tuple[str, str]:
        """(system, user): the system part (instructions, scaffold, task) is the same every turn."""
        parts = render_prompt(
            self.instructions,
            ep.state.task_description,
            ep.history,
            ep.state.observation,
            admissible,
            self.spec.environment.history_window,
        )
        return with_scaffold(parts.system, ep.view), parts.user

    def _prompt_ids(self, ep: Episode, admissible) -> list[int]:
        return self.policy.chat_ids(*self._prompt_parts(ep, admissible))

    def _act(
        self, live: list[Episode], greedy: bool, prefixes: PrefixStore | None = None
    ) -> list[tuple[str, str, bool, str, int, int]]:
        """(action, raw output, valid, reason, prompt tokens, response tokens) per live episode.
        Score mode scores all live episodes together (`trainer.rollout_batching`), their system
        prompts' keys/values kept in `prefixes` across turns; or one episode at a time."""
        if self.spec.policy.action == "score":
            actions = [list(ep.state.admissible) for ep in live]
            parts = [self._prompt_parts(ep, a) for ep, a in zip(live, actions, strict=True)]
            if self.policy.trainer.rollout_batching:
                split = [self.policy.chat_split(system, user) for system, user in parts]
                prompts = [head + rest for head, rest in split]
                chosen = [i for i, _ in self.policy.choose_batch(split, actions, greedy, prefixes)]
            else:
                prompts = [self.policy.chat_ids(system, user) for system, user in parts]
                chosen = [self.policy.choose(p, a, greedy)[0] for p, a in zip(prompts, actions, strict=True)]
            out = []
            for ep, prompt, acts, index in zip(live, prompts, actions, chosen, strict=True):
                ep.items.append(ScoredTurn(tuple(prompt), tuple(acts), index))
                action = acts[index]
                out.append((action, action, True, "", len(prompt), len(self.policy.action_ids(action))))
            return out
        prompts = [self._prompt_ids(ep, list(ep.state.admissible) or None) for ep in live]
        outputs = self.policy.generate(prompts, self.spec.policy.max_new_tokens, greedy)
        out = []
        for ep, prompt, response in zip(live, prompts, outputs, strict=True):
            text = self.policy.tokenizer.decode(response, skip_special_tokens=True)
            if getattr(ep.env, "parses_output", False):  # free-text actions: the env reads the output
                action, valid, reason = text.strip(), True, ""
            else:
                action, valid, reason = parse_action(text, list(ep.state.admissible) or None)
            if response:
                ep.items.append(GeneratedTurn(tuple(prompt), tuple(response)))
            out.append((action, text, valid, reason, len(prompt), len(response)))
        return out

    async def _step(self, ep: Episode, act) -> None:
        action, output, valid, reason, prompt_tokens, response_tokens = act
        before = ep.state.observation
        if valid:
            try:
                result = await ep.env.step(action)
            except EnvironmentFault as err:
                ep.done, ep.error = True, f"environment died: {err}"
                result = StepResult(observation=before, valid=False, invalid_reason=str(err))
        else:
            result = StepResult(
                observation=before, admissible=ep.state.admissible, valid=False, invalid_reason=reason
            )
        ep.turns.append(
            Turn(
                observation=before,
                action=action,
                output=output,
                valid=result.valid,
                invalid_reason=result.invalid_reason,
                reward=result.reward,
                prompt_tokens=prompt_tokens,
                response_tokens=response_tokens,
            )
        )
        ep.history.append((action or output[:80], result.observation))
        ep.reward += result.reward
        ep.won = ep.won or result.won
        ep.done = ep.done or result.done
        if not result.admissible:  # an env may leave them out of an invalid or final step
            result = result.model_copy(update={"admissible": ep.state.admissible})
        ep.state = result

    def _train_item(self, stored: StoredTurn, advantage: float, weight: float) -> ChoiceItem | TrainItem:
        """A stored turn as a training item, now that its episode's advantage is known."""
        if isinstance(stored, ScoredTurn):
            return self.policy.choice_item(stored.prompt, stored.actions, stored.chosen, advantage, weight)
        prompt, response = stored.prompt, stored.response
        return TrainItem(
            input_ids=prompt + response,
            loss_mask=(0,) * len(prompt) + (1,) * len(response),
            advantage=advantage,
            weight=weight,
        )

    def _record(self, ep: Episode, scaffolded: bool) -> Rollout:
        return Rollout(
            id=ep.id,
            task_id=ep.task.id,
            scaffolded=scaffolded,
            scaffold_version=ep.view.version,
            turns=tuple(ep.turns),
            reward=ep.reward,
            success=ep.won,
            truncated=not ep.done,
            error=ep.error,
        )
