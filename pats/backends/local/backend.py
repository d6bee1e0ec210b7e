"""The local PolicyBackend: batched multi-turn episodes on real environments, GRPO updates.

All episodes of a step advance together, one turn at a time: the policy acts for every live episode
(score mode: all episodes' candidates scored in a few batched passes, each system prompt computed
once per rollout, or one scoring pass per episode; generate mode: one batched `generate` over all of
them, each system prompt's keys/values likewise computed once per rollout), then every environment
steps concurrently. `rollout` returns each group with its rollouts' played turns (`Played.training`:
ScoredTurn / GeneratedTurn), and `update` turns them into training items (ChoiceItem / TrainItem)
once the group's rewards give their advantages. Departures from the published setup: episodes are
a fresh prompt per turn with a history window (as verl-agent), not a growing chat; each item is
weighted 1 / turns so every episode counts once in the loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pats.backends.local.grpo import group_advantages
from pats.backends.local.items import ChoiceItem, TrainItem
from pats.backends.local.memory import release_free_memory
from pats.backends.local.policy import LocalPolicy
from pats.backends.local.scoring import PrefixStore
from pats.envs.prompting import instructions, render_prompt
from pats.episode import Act, Episode, read_output
from pats.protocols import Env, GroupPlan, Played
from pats.scaffold import place, with_scaffold
from pats.spec.models import ExperimentSpec
from pats.types import EMPTY_VIEW, Rollout, RolloutGroup, ScaffoldView, Task, UpdateStats


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
class Seat:
    """An episode at one of the backend's environments, with the turns it played for the update."""

    episode: Episode
    env: Env
    played: list[StoredTurn] = field(default_factory=list)  # per turn; the advantage comes in update()


class LocalBackend:
    def __init__(self, spec: ExperimentSpec, make_env: Callable[[], Env], policy: LocalPolicy | None = None):
        self.spec = spec
        self.policy = policy or LocalPolicy(spec.policy, spec.local_trainer(), spec.seed)
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
        seats = await self.play(episodes, greedy=False)
        played = []
        for plan, ids in shape:
            rollouts = tuple(seats[i].episode.record(scaffolded=i - ids[0] >= plan.probes) for i in ids)
            group = RolloutGroup(
                step=step, task=plan.task, scaffold_version=plan.view.version, rollouts=rollouts
            )
            played.append(Played(group, training=tuple(tuple(seats[i].played) for i in ids)))
        return played

    async def update(self, played: Sequence[Played[tuple[StoredTurn, ...]]]) -> UpdateStats:
        batch = []
        for p in played:
            rewards = torch.tensor(p.group.rewards, dtype=torch.float64)  # (G,)
            advantages = group_advantages(rewards, self.spec.trainer.normalize_advantage_std)
            for turns, adv in zip(p.training, advantages.tolist(), strict=True):
                batch += [self.train_item(turn, adv, 1.0 / len(turns)) for turn in turns]
        # In a thread: torch releases the GIL, so the scaffold review runs beside the update.
        return UpdateStats(**await asyncio.to_thread(self.policy.update, batch))

    async def evaluate(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]:
        n = self.spec.eval.samples_per_task
        episodes = [(f"eval-{t.id}-{k}", t, v) for t, v in zip(tasks, views, strict=True) for k in range(n)]
        seats = await self.play(episodes, greedy=self.spec.eval.greedy)
        return [s.episode.record(scaffolded=not s.episode.view.empty) for s in seats]

    def save(self, directory: Path) -> None:
        self.policy.save(directory / "policy")

    def load(self, directory: Path) -> None:
        self.policy.load(directory / "policy")

    async def close(self) -> None:
        await asyncio.gather(*(env.close() for env in self.envs))
        self.envs.clear()

    # -- episodes ------------------------------------------------------------------------------

    async def play(self, specs: Sequence[tuple[str, Task, ScaffoldView]], greedy: bool) -> list[Seat]:
        while len(self.envs) < len(specs):
            self.envs.append(self.make_env())
        seats = [
            Seat(Episode(rid, task, view), env)
            for (rid, task, view), env in zip(specs, self.envs, strict=False)
        ]
        await asyncio.gather(*(s.episode.reset(s.env.reset) for s in seats))
        prefixes = PrefixStore()  # system-prompt keys/values, valid while the weights stay the same
        # The frozen weights' bf16 copies (under autocast) made once for the whole play, not once a
        # turn: nothing trains while episodes play, and each turn's own entry then finds them made.
        with self.policy.bf16_weights():
            for _ in range(self.spec.environment.max_turns):
                live = [s for s in seats if not s.episode.done]
                if not live:
                    break
                acts = self._act(live, greedy, prefixes)
                release_free_memory()  # the turn's temporary tensors (pats.backends.local.memory)
                await asyncio.gather(
                    *(s.episode.step(a, s.env.step) for s, a in zip(live, acts, strict=True))
                )
        return seats

    def prompt_parts(self, ep: Episode, admissible) -> tuple[str, str]:
        """(system, user) texts of the prompt the policy acts on at the episode's current state: the
        system part (instructions, task, a scaffold placed there) is the same every turn; a scaffold
        placed in the turn goes before the admissible actions, its plans shown as `scaffold.plan_view`
        says. The one place prompts are rendered: acting, warm-start data and the benchmarks all read
        them here."""
        scaffold = self.spec.scaffold
        system_view, guidance = place(
            ep.view, scaffold.placement, scaffold.plan_view, ep.actions_taken(), admissible or ()
        )
        parts = render_prompt(
            self.instructions,
            ep.current.task_description,
            ep.history,
            ep.current.observation,
            admissible,
            self.spec.environment.window,
            guidance,
        )
        return with_scaffold(parts.system, system_view), parts.user

    def prompt_ids(self, ep: Episode, admissible) -> list[int]:
        """The token ids of the prompt the policy acts on at the episode's current state."""
        return self.policy.chat_ids(*self.prompt_parts(ep, admissible))

    def _act(self, live: list[Seat], greedy: bool, prefixes: PrefixStore | None = None) -> list[Act]:
        """Each live episode's action. Score mode scores all live episodes together, generate mode
        samples them in one batch; with `trainer.rollout_batching` their system prompts' keys/values
        are kept in `prefixes` across turns (else score mode goes one episode at a time and generate
        mode runs whole prompts)."""
        score = self.spec.policy.action == "score"
        admissible = [list(s.episode.current.admissible) for s in live]
        parts = [
            self.prompt_parts(s.episode, a if score else a or None)
            for s, a in zip(live, admissible, strict=True)
        ]
        split = [self.policy.chat_split(system, user) for system, user in parts]
        prompts = [head + rest for head, rest in split]
        if score:
            scores = self.policy.decision_scores(split, admissible, prefixes)
            chosen = [self.policy.pick(s, greedy)[0] for s in scores]
            out = []
            for seat, prompt, acts, index in zip(live, prompts, admissible, chosen, strict=True):
                seat.played.append(ScoredTurn(tuple(prompt), tuple(acts), index))
                action = acts[index]
                tokens = len(self.policy.action_ids(action))
                out.append(Act(action, action, prompt_tokens=len(prompt), response_tokens=tokens))
            return out
        outputs = self.policy.generate_batch(split, self.spec.policy.max_new_tokens, greedy, prefixes)
        out = []
        for seat, prompt, response, acts in zip(live, prompts, outputs, admissible, strict=True):
            text = self.policy.tokenizer.decode(response, skip_special_tokens=True)
            assert isinstance(text, str), "one sequence decodes to one text"
            parses = seat.env.parses_output
            out.append(
                read_output(
                    text, acts or None, parses, prompt_tokens=len(prompt), response_tokens=len(response)
                )
            )
            if response:
                seat.played.append(GeneratedTurn(tuple(prompt), tuple(response)))
        return out

    def train_item(self, stored: StoredTurn, advantage: float, weight: float) -> ChoiceItem | TrainItem:
        """A stored turn (`Played.training`) as the item `policy.update` trains, now that its episode's
        advantage is known; `update` makes every item this way, and benchmarks time updates on them."""
        if isinstance(stored, ScoredTurn):
            return self.policy.choice_item(stored.prompt, stored.actions, stored.chosen, advantage, weight)
        return TrainItem.of(stored.prompt, stored.response, advantage, weight)
