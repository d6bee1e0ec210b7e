"""In a group that mixes probes (no scaffold) and scaffolded rollouts, every rollout's reward reaches
its own training items, with the group's advantage, and each item's prompt is the one that rollout
saw: probes' without the scaffold text, the others' with it (issue 13, item 6).

Real SmolLM2-135M-Instruct, real twc games, the local backend's own rollout() and update(). The
policy's optimizer step is the one thing replaced: the batch it receives is what is checked. The
rewards are then set to distinct values on the returned records (the untrained policy nearly always
scores 0, which would make every advantage 0 and the check blind), so each rollout's advantage is
its own and a mix-up between rollouts, or between probes and scaffolded ones, cannot pass.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from pats.backends.local.backend import LocalBackend
from pats.backends.local.grpo import group_advantages
from pats.engine.run import make_env_factory
from pats.protocols import GroupPlan, Played
from pats.spec import load_spec
from pats.types import ScaffoldView

pytestmark = pytest.mark.slow

GUIDANCE = "- Plan: look around, then take what lies on the floor and put it where it belongs."


def with_rewards(played, rewards):
    group = played.group
    rollouts = tuple(r.model_copy(update={"reward": x}) for r, x in zip(group.rollouts, rewards, strict=True))
    return Played(group.model_copy(update={"rollouts": rollouts}), played.training)


def test_each_rollouts_reward_reaches_its_items_with_the_group_advantage(repo):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["environment.max_turns=3", "trainer.threads=1"])
    make_env = make_env_factory(spec)
    backend = LocalBackend(spec, make_env)
    tasks = make_env().tasks("train")[:2]
    view = ScaffoldView(version="v1", text=GUIDANCE, tokens=20)
    plans = [GroupPlan(task=t, view=view, size=4, probes=2) for t in tasks]
    batches = []
    backend.policy.update = lambda batch: batches.append(batch) or {"loss": 0.0}
    try:
        played = asyncio.run(backend.rollout(0, plans))
        rewards = [[0.0, 1.0, 0.25, 0.5], [0.75, 0.0, 1.0, 0.1]]  # distinct advantages within a group
        played = [with_rewards(p, xs) for p, xs in zip(played, rewards, strict=True)]
        asyncio.run(backend.update(played))
    finally:
        asyncio.run(backend.close())

    (batch,) = batches
    position = 0
    for group, xs in zip((p.group for p in played), rewards, strict=True):
        advantages = group_advantages(
            torch.tensor(xs, dtype=torch.float64), spec.trainer.normalize_advantage_std
        )
        assert len(set(advantages.tolist())) == 4
        for i, (rollout, adv) in enumerate(zip(group.rollouts, advantages.tolist(), strict=True)):
            assert rollout.scaffolded == (i >= 2)
            items = batch[position : position + len(rollout.turns)]
            position += len(rollout.turns)
            assert len(items) == len(rollout.turns) > 0
            assert all(item.advantage == pytest.approx(adv) for item in items), rollout.id
            assert sum(item.weight for item in items) == pytest.approx(1.0)  # one episode, one unit
            for item, turn in zip(items, rollout.turns, strict=True):
                prompt = backend.policy.tokenizer.decode(item.prompt_ids)
                assert (GUIDANCE in prompt) == rollout.scaffolded, rollout.id
                assert len(item.prompt_ids) == turn.prompt_tokens
                assert (
                    backend.policy.tokenizer.decode(item.candidates[item.chosen])
                    .strip()
                    .startswith(turn.action)
                )
    assert position == len(batch)
