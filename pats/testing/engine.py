"""An engine on `FakeEnv` tasks and a backend without a model: the scaffold, review and step loop
exercised end to end in well under a second per step (pats' own tests use it; so can a user's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pats.build import build_scaffold_policy
from pats.engine.loop import Engine
from pats.engine.sampler import TaskSampler
from pats.logging.events import EventLog
from pats.protocols import PolicyBackend
from pats.spec.models import ExperimentSpec
from pats.testing.fakes import FakeEnv


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
