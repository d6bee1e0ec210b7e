"""An engine on `FakeEnv` tasks and a backend without a model: the scaffold, review and step loop
exercised end to end in well under a second per step (pats' own tests use it; so can a user's).
`play_group` is the other end: one group of real episodes of a spec's environment, played by the
spec's backend with its model, to check what an environment makes of real policy output."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pats.build import build_scaffold_policy
from pats.engine.loop import Engine
from pats.engine.sampler import TaskSampler
from pats.logging.events import EventLog
from pats.protocols import PolicyBackend
from pats.spec.models import ExperimentSpec
from pats.testing.fakes import FakeEnv
from pats.types import EMPTY_VIEW, RolloutGroup


def fake_engine(
    spec: ExperimentSpec,
    directory: Path,
    backend: PolicyBackend,
    count_tokens: Callable[[str], int],
    scaffold=None,
    eval_tasks: int | None = None,
) -> Engine:
    """An Engine over 4 FakeEnv tasks writing to `directory` (scaffold/, events.jsonl); `scaffold`
    wraps or replaces the spec's scaffold policy, `eval_tasks` keeps that many evaluation tasks."""
    env = FakeEnv(num_tasks=4)
    scaffold = scaffold or build_scaffold_policy(spec, directory / "scaffold", count_tokens, env.expert_plan)
    return Engine(
        spec=spec,
        backend=backend,
        scaffold=scaffold,
        sampler=TaskSampler(env.tasks("train"), spec.trainer.tasks_per_step, spec.seed),
        eval_tasks=env.tasks("eval")[:eval_tasks],
        events=EventLog(directory / "events.jsonl"),
    )


@dataclass(frozen=True)
class PlayedGroup:
    """What `play_group` played: the group, each rollout's training record by rollout id (the local
    backend's StoredTurns), and the backend, closed (what needs no model, e.g. `train_item`, still works)."""

    group: RolloutGroup
    training: dict[str, Any]
    backend: Any


def play_group(spec: ExperimentSpec, size: int = 2) -> PlayedGroup:
    """One group of `size` episodes on the spec's first training task, without a scaffold, played by
    the spec's backend (`make_backend`: the local one, its model loaded); backend and environment are
    closed after."""
    from pats.engine.run import make_backend, make_env_factory
    from pats.protocols import GroupPlan

    make_env = make_env_factory(spec)
    backend = make_backend(spec, make_env)
    env = make_env()
    task = env.tasks("train")[0]

    async def go():
        try:
            (played,) = await backend.rollout(0, [GroupPlan(task=task, view=EMPTY_VIEW, size=size)])
            return played
        finally:
            await backend.close()
            await env.close()

    played = asyncio.run(go())
    training = dict(zip((r.id for r in played.group.rollouts), played.training, strict=True))
    return PlayedGroup(played.group, training, backend)
