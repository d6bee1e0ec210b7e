"""The scaffold service: the pats scaffold store as one named Ray actor for a whole verl run.

verl builds a fresh agent loop object per sample, in several worker processes, so shared state lives
here. Agent loops call two methods:
- `pin(uid, task, global_steps)`: the view a rollout plays under. The first pin of a group (verl's
  `uid`, shared by its n rollouts) fixes the view for all of them, so a group never mixes versions;
  the first `probe_count()` pins of a group get no scaffold (probe rollouts, for the utility card).
- `report(uid, rollout)`: the finished trajectory's summary (a `pats.types.Rollout`).

Revisions run at step boundaries. Choice: no custom verl trainer. A step's review starts as soon as
every group of the step has reported (tasks_per_step groups of group_size rollouts), so it overlaps
verl's policy update as the local engine's review does; and at the latest when a pin of a newer
`global_steps` arrives (a step where a rollout failed never completes), that pin waits for it. This
needs nothing from verl but the `global_steps` it passes to every loop, so the launch stays plain
`python -m verl.trainer.main_ppo` and works on any Ray cluster. A custom V1 trainer hook
(`prepare_step`) would give the same boundary at the price of a custom TaskRunner and entry point.
It relies on the sync trainer (`trainer.v1.trainer_mode=sync`, set by pats), which finishes a step's
rollouts before the next step's start; a report that arrives after its step was reviewed is counted
in `late_reports` and left out.

State on disk, as the local backend keeps it: `<run_dir>/scaffold/` (every version, via
`ScaffoldStore`), `<run_dir>/scaffold/judge.json` (the judge's EMA state), `<run_dir>/events.jsonl`
(groups, cards, assessments, edits, versions, metrics per step) and `<run_dir>/metrics.jsonl` (the
step metrics the local engine logs: informative fraction, success with and without the scaffold,
entries and tokens, edits, review faults). Unless `logging.wandb` is disabled the same metrics and
each new version's entries table go to a W&B run `<name>-scaffold` in the group `<name>`, beside the
run verl's trainer logs. pats steps are verl's
`global_steps - 1` (verl counts from 1). A restarted run reopens every version it finds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pats.types import EMPTY_VIEW, Rollout, RolloutGroup, ScaffoldView, Task

logger = logging.getLogger(__name__)
NAMESPACE = "pats"  # fixed, so every job on a cluster finds its run's service by name


def service_name(spec_name: str) -> str:
    return f"pats_scaffold_{spec_name}"


@dataclass
class _Group:
    step: int
    task: Task
    view: ScaffoldView
    pins: int = 0
    rollouts: list[Rollout] = field(default_factory=list)


class ScaffoldService:
    """Plain class (async methods); `connect` runs it as a Ray actor, tests may use it in-process."""

    def __init__(self, spec_path: str, run_dir: str):
        import pats.envs  # noqa: F401  (registers the built-in environments)
        from pats.build import build_scaffold_policy
        from pats.logging.events import EventLog
        from pats.models import token_counter
        from pats.registry import ENVIRONMENTS
        from pats.spec import load_spec

        self.spec = load_spec(spec_path)
        self.run_dir = Path(run_dir)
        env = ENVIRONMENTS.get(self.spec.environment.kind)(self.spec.environment)
        types = sorted({t.type for t in env.tasks("train")})
        self.scaffold = build_scaffold_policy(
            self.spec,
            self.run_dir / "scaffold",
            token_counter(self.spec.policy.model),
            env.expert_plan,
            task_types=types,
        )
        self._judge_file = self.run_dir / "scaffold" / "judge.json"
        if self._judge_file.is_file():
            self.scaffold.load_state_dict(json.loads(self._judge_file.read_text("utf-8")))
        self.events = EventLog(self.run_dir / "events.jsonl")
        self.sinks = _sinks(self.spec, self.run_dir)
        self.probes = self.spec.probe_count()
        self.groups: dict[str, _Group] = {}  # uid -> group, for steps not yet reviewed
        self.reviews: dict[int, asyncio.Task] = {}  # step -> its review
        self.reviewed: set[int] = set()
        self.late_reports = 0

    # -- called by the agent loops -----------------------------------------------------------

    async def pin(self, uid: str, task_json: str, global_steps: int) -> dict:
        """{"text", "version", "scaffolded"} for the next rollout of group `uid` at verl step `global_steps`."""
        step = int(global_steps) - 1
        for older in sorted({g.step for g in self.groups.values() if g.step < step}):
            self._start_review(older)
        for older in [s for s in self.reviews if s < step]:
            await self.reviews[older]  # the pins of a new step wait for the previous step's edits
        group = self.groups.get(uid)
        if group is None:
            task = Task.model_validate_json(task_json)
            group = self.groups[uid] = _Group(step, task, self.scaffold.view(task))
        scaffolded = group.pins >= self.probes
        group.pins += 1
        view = group.view if scaffolded else EMPTY_VIEW
        return {"text": view.text, "version": view.version, "scaffolded": scaffolded}

    async def view(self, task_json: str) -> dict:
        """{"text", "version"}: the current scaffold's view of a task (validation with the scaffold)."""
        view = self.scaffold.view(Task.model_validate_json(task_json))
        return {"text": view.text, "version": view.version}

    async def report(self, uid: str, rollout_json: str) -> None:
        group = self.groups.get(uid)
        if group is None:
            self.late_reports += 1
            return
        group.rollouts.append(Rollout.model_validate_json(rollout_json))
        tr = self.spec.trainer
        mine = [g for g in self.groups.values() if g.step == group.step]
        if len(mine) >= tr.tasks_per_step and all(len(g.rollouts) >= tr.group_size for g in mine):
            self._start_review(group.step)  # the step is complete: review while verl updates

    async def state(self) -> dict:
        """The store's current version and the service's counters (for logs and tests)."""
        store = self.scaffold.store
        current = store.current if store else None
        return {
            "version": current.number if current else 0,
            "hash": current.hash if current else "",
            "reviewed_steps": sorted(self.reviewed),
            "open_groups": len(self.groups),
            "late_reports": self.late_reports,
        }

    async def wait_reviews(self) -> None:
        """Wait for reviews in flight (the end of a run; tests)."""
        for review in list(self.reviews.values()):
            await review

    # -- reviews -----------------------------------------------------------------------------

    def _start_review(self, step: int) -> None:
        if step in self.reviews or step in self.reviewed:
            return
        taken = {uid: g for uid, g in self.groups.items() if g.step == step}
        for uid in taken:
            del self.groups[uid]
        self.reviews[step] = asyncio.create_task(self._review(step, list(taken.values())))

    async def _review(self, step: int, taken: list[_Group]) -> None:
        from pats.logging.events import write_review
        from pats.metrics import group_metrics, scaffold_metrics

        groups = [
            RolloutGroup(step=step, task=g.task, scaffold_version=g.view.version, rollouts=tuple(g.rollouts))
            for g in taken
            if g.rollouts
        ]
        try:
            committed = self.scaffold.commit(await self.scaffold.review(step, groups), step)
            result, version, metrics = committed.result, committed.version, committed.metrics
        except Exception as err:  # a failed review keeps the scaffold; training goes on
            logger.exception("pats scaffold review of step %d failed", step)
            self.events.write(step, "review_failed", error=f"{type(err).__name__}: {err}")
            store = self.scaffold.store
            result, version, metrics = None, None, scaffold_metrics(store.current if store else None)
        write_review(self.events, step, groups, result, version)
        metrics = {**group_metrics(groups), **metrics}
        if self.scaffold.store is not None:
            from pats.fileio import write_atomic

            write_atomic(self._judge_file, json.dumps(self.scaffold.state_dict(), indent=1))
        self.events.end_step(step, metrics=metrics)
        for sink in self.sinks:
            sink.log(step, metrics)
            if version is not None:
                sink.scaffold(step, version)
        self.reviewed.add(step)
        self.reviews.pop(step, None)


def _sinks(spec, run_dir: Path) -> list:
    from pats.logging.sinks import JsonlSink, WandbSink

    sinks = [JsonlSink(run_dir / "metrics.jsonl")]
    if spec.logging.wandb != "disabled":
        config = spec.model_dump(mode="json")
        name, log = f"{spec.name}-scaffold", spec.logging
        sinks.append(WandbSink(run_dir, log.project, log.entity, log.wandb, name, config, group=spec.name))
    return sinks


class RayServiceClient:
    """The agent loops' view of the service actor: the same async methods, over Ray."""

    def __init__(self, handle):
        self.handle = handle

    async def pin(self, uid: str, task_json: str, global_steps: int) -> dict:
        return await self.handle.pin.remote(uid, task_json, global_steps)

    async def view(self, task_json: str) -> dict:
        return await self.handle.view.remote(task_json)

    async def report(self, uid: str, rollout_json: str) -> None:
        await self.handle.report.remote(uid, rollout_json)

    async def state(self) -> dict:
        return await self.handle.state.remote()

    async def wait_reviews(self) -> None:
        await self.handle.wait_reviews.remote()


@lru_cache(maxsize=8)
def connect(spec_path: str, run_dir: str) -> RayServiceClient:
    """The run's service actor, created by whichever process asks first (`get_if_exists`).

    Placed on the Ray head node, where `pats run` (or the launch script) writes the run directory;
    `num_cpus=0` so it never takes a slot verl's workers are waiting for.
    """
    import ray

    from pats.spec import load_spec

    name = service_name(load_spec(spec_path).name)
    actor = ray.remote(ScaffoldService).options(
        name=name,
        namespace=NAMESPACE,
        get_if_exists=True,
        num_cpus=0,
        resources={"node:__internal_head__": 0.001},
        max_concurrency=1000,  # an async actor: pins and reports interleave, reviews run beside them
    )
    return RayServiceClient(actor.remote(spec_path, run_dir))
