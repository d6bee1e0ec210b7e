"""A policy that plays a real environment from its walkthroughs, for recording reviser bundles fast.

The embedded 135M policy almost never wins ALFWorld within a CPU-sized run, so its groups are all
failures and its evidence cards say only that. `WalkthroughBackend` plays the environment's own games
(the real env, its real observations and rewards) without a model: in each group, the first
`round(size * expert_fraction)` scaffolded rollouts follow the game's walkthrough (`env.expert_plan`)
and the others take random admissible actions, so groups are mixed and the review gets outcome,
contrast and failure cards as a learning policy's run would. Probe rollouts (the empty view) play at
random. It never learns: `update` returns zero statistics.

`walkthrough_run(spec, run_dir)` runs pats' own engine (scaffold store, review, event log, scaffold
versions) with this backend, so the run directory reads like a `pats run` one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

from pats.protocols import Env, GroupPlan, Played
from pats.types import EMPTY_VIEW, Rollout, RolloutGroup, ScaffoldView, Task, Turn, UpdateStats


class WalkthroughBackend:
    def __init__(
        self, make_env: Callable[[], Env], max_turns: int, expert_fraction: float = 0.5, seed: int = 0
    ):
        self.make_env, self.max_turns, self.expert_fraction = make_env, max_turns, expert_fraction
        self.rng = random.Random(seed)
        self._env: Env | None = None

    def _environment(self) -> Env:
        if self._env is None:
            self._env = self.make_env()
        return self._env

    async def _play(
        self, rid: str, task: Task, view: ScaffoldView, scaffolded: bool, expert: bool
    ) -> Rollout:
        env = self._environment()
        plan = list(env.expert_plan(task) or []) if expert else []
        result = await env.reset(task)
        turns, reward, won = [], 0.0, False
        for i in range(self.max_turns):
            if plan and i < len(plan):
                action = plan[i]
            else:
                action = self.rng.choice(result.admissible) if result.admissible else "look"
            observation = result.observation
            result = await env.step(action)
            reward += result.reward
            turns.append(
                Turn(observation=observation, action=action, output=action, valid=result.valid,
                     invalid_reason=result.invalid_reason, reward=result.reward,
                     prompt_tokens=view.tokens if scaffolded else 0, response_tokens=1)
            )  # fmt: skip
            if result.done:
                won = result.won
                break
        return Rollout(
            id=rid,
            task_id=task.id,
            scaffolded=scaffolded,
            scaffold_version=view.version,
            turns=tuple(turns),
            reward=reward,
            success=won,
            truncated=not result.done,
        )

    async def rollout(self, step: int, plans: Sequence[GroupPlan]) -> list[Played]:
        played: list[Played] = []
        for plan in plans:
            experts = round((plan.size - plan.probes) * self.expert_fraction)
            rollouts = []
            for i in range(plan.size):
                scaffolded = i >= plan.probes
                view = plan.view if scaffolded else EMPTY_VIEW
                expert = scaffolded and i - plan.probes < experts
                rollouts.append(
                    await self._play(f"s{step}-{plan.task.id}-{i}", plan.task, view, scaffolded, expert)
                )
            group = RolloutGroup(
                step=step, task=plan.task, scaffold_version=plan.view.version, rollouts=tuple(rollouts)
            )
            played.append(Played(group))
        return played

    async def update(self, played: Sequence[Played]) -> UpdateStats:
        return UpdateStats()

    async def evaluate(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]:
        return [
            await self._play(f"eval-{t.id}", t, v, True, False) for t, v in zip(tasks, views, strict=True)
        ]

    def save(self, directory: Path) -> None:
        pass

    def load(self, directory: Path) -> None:
        pass

    async def close(self) -> None:
        if self._env is not None:
            await self._env.close()


def walkthrough_run(spec_file: str, overrides: Sequence[str], root: Path) -> Path:
    """Train `spec_file` (with `overrides`) on WalkthroughBackend under `root/<name>`; the run directory."""
    import asyncio

    from pats.build import build_scaffold_policy
    from pats.engine.loop import Engine
    from pats.engine.run import make_env_factory, new_run
    from pats.engine.sampler import TaskSampler
    from pats.logging.events import EventLog
    from pats.models import token_counter
    from pats.spec import load_spec

    spec = load_spec(spec_file, [*overrides, f"logging.root={root}"])
    run_dir = new_run(spec)
    make_env = make_env_factory(spec)
    env = make_env()
    count = token_counter(spec.policy.model)
    backend = WalkthroughBackend(make_env, spec.environment.max_turns, seed=spec.seed)
    engine = Engine(
        spec=spec,
        backend=backend,
        scaffold=build_scaffold_policy(spec, run_dir / "scaffold", count, env.expert_plan),
        sampler=TaskSampler(env.tasks("train"), spec.local_trainer().tasks_per_step, spec.seed),
        eval_tasks=env.tasks("eval")[:1],  # the engine evaluates after the last step
        events=EventLog(run_dir / "events.jsonl"),
    )

    async def go() -> None:
        try:
            await engine.run()
        finally:
            await backend.close()
            await env.close()

    asyncio.run(go())
    return run_dir
