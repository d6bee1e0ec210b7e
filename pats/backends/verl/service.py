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

Each step ends through `pats.step_end.StepEnd`, the local engine's step end: a review that raises is
logged (`review_failed`) and the step trains on with the current scaffold; `scaffold.max_failed_reviews`
in a row stop the run: the next pin raises the error, and verl's trainer, which only logs the failed
groups of loops that raise, ends the job with it (`stop_reason`, asked by pats.backends.verl.sampler).
State on disk, as a local run keeps it: `<run_dir>/scaffold/` (every version), `<run_dir>/scaffold/steps/NNNNNN.json` (the
store's version and the judge's state at each step's end), `<run_dir>/events.jsonl` and
`<run_dir>/metrics.jsonl`. Unless `logging.wandb` is disabled the same metrics and each new version's
entries table go to a W&B run `<name>-scaffold` in the group `<name>`, beside the run verl's trainer
logs. pats steps are verl's `global_steps - 1` (verl counts from 1).

Resume: verl resumes from its latest checkpoint (`checkpoints/latest_checkpointed_iteration.txt`,
global step g, so pats step g - 1 is the last finished); a new service cuts the scaffold store, the
judge's state, the event log and metrics.jsonl back to that step (`resume_state`, the resume rule of
pats.step_end), and refuses to start when that step's scaffold state was never saved, or when the
first pin is not of the step after it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from pats.errors import PatsError, PrerequisiteError, TrainingError
from pats.step_end import STATES
from pats.types import (
    EMPTY_VIEW,
    JudgeState,
    Record,
    Rollout,
    RolloutGroup,
    ScaffoldState,
    ScaffoldView,
    Task,
)

logger = logging.getLogger(__name__)
NAMESPACE = "pats"  # fixed, so every job on a cluster finds its run's service by name


def service_name(spec_name: str) -> str:
    return f"pats_scaffold_{spec_name}"


class Pinned(Record):
    """The service's answer to a pin: the view a rollout plays under; probes see the empty view."""

    view: ScaffoldView
    scaffolded: bool


class ServiceState(Record):
    """The store's current version, the judge's state and the service's counters (logs and tests)."""

    version: int
    hash: str
    judge: JudgeState
    reviewed_steps: tuple[int, ...]
    open_groups: int
    late_reports: int
    failed_reviews_in_a_row: int


TRACKER = Path("checkpoints") / "latest_checkpointed_iteration.txt"  # verl's, under the run directory


def resume_state(run_dir: Path) -> ScaffoldState | None:
    """The scaffold side of the step of verl's latest checkpoint (None: verl starts from step 0).

    verl writes the tracker after saving global step g, whose pats step g - 1 the step end saved as
    scaffold/steps/NNNNNN.json once that step's review was done; a checkpoint can get ahead of it
    when the job stops between the two, and then the scaffold and the judge cannot match the policy."""
    tracker = run_dir / TRACKER
    if not tracker.is_file():
        return None
    try:
        global_step = int(tracker.read_text("utf-8").strip())
    except ValueError:
        raise PrerequisiteError(
            f"{tracker} does not hold verl's step number; restore it or remove it"
        ) from None
    step = global_step - 1
    path = run_dir / STATES / f"{step:06d}.json"
    if step < 0:
        return None
    try:
        return ScaffoldState.model_validate_json(path.read_text("utf-8"))
    except FileNotFoundError:
        raise PrerequisiteError(
            f"verl resumes from its checkpoint of global step {global_step} (pats step {step}), but the "
            f"scaffold service saved no scaffold state for that step ({path} is missing: the job stopped "
            "after verl's checkpoint and before the step's review ended), so the scaffold and the "
            "judge would not match the policy. Resume from an earlier checkpoint that has one: write "
            f"its global step into {tracker} (pats step = global step - 1, see {path.parent}), or "
            "start a new run directory"
        ) from None
    except ValidationError as err:
        raise PrerequisiteError(f"{path} is not a scaffold state ({err.errors()[0]['msg']})") from None


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
        from pats.models import token_counter
        from pats.registry import ENVIRONMENTS
        from pats.spec import load_spec
        from pats.step_end import restore

        self.spec = load_spec(spec_path)
        self.run_dir = Path(run_dir)
        env = ENVIRONMENTS.get(self.spec.environment.kind)(self.spec.environment)
        resumed = resume_state(self.run_dir)
        self.end = restore(
            self.spec,
            self.run_dir,
            token_counter(self.spec.policy.model),
            env.expert_plan,
            task_types=sorted({t.type for t in env.tasks("train")}),
            state=resumed,
            keep_states=True,
        )
        self.end.sinks = [*self.end.sinks, *_wandb(self.spec, self.run_dir)]
        self.scaffold, self.events, self.sinks = self.end.scaffold, self.end.events, self.end.sinks
        self.probes = self.spec.probe_count()
        self.groups: dict[str, _Group] = {}  # uid -> group, for steps not yet reviewed
        self.reviews: dict[int, asyncio.Task] = {}  # step -> its review
        self.reviewed: set[int] = set()
        self.played: dict[int, int] = {}  # step -> the scaffold version number its groups play
        self.late_reports = 0
        self.first_step: int | None = resumed.step + 1 if resumed else 0  # None once checked
        # k failed reviews in a row, or a first pin of another step than the restored one's next:
        # every pin raises it, so verl's job stops.
        self.stopped: PatsError | None = None
        self.stopped_from = 0  # the first verl global step the stop applies to

    # -- called by the agent loops -----------------------------------------------------------

    async def pin(self, uid: str, task_json: str, global_steps: int) -> Pinned:
        """The view of the next rollout of group `uid` at verl step `global_steps`."""
        step = int(global_steps) - 1
        if self.first_step is not None:
            self._check_first(step, self.first_step)
        for older in sorted({g.step for g in self.groups.values() if g.step < step}):
            self._start_review(older)
        for older in [s for s in self.reviews if s < step]:
            await self.reviews[older]  # the pins of a new step wait for the previous step's edits
        if self.stopped is not None:
            raise self.stopped
        group = self.groups.get(uid)
        if group is None:
            task = Task.model_validate_json(task_json)
            group = self.groups[uid] = _Group(step, task, self._view_of_step(task, step))
        scaffolded = group.pins >= self.probes
        group.pins += 1
        return Pinned(view=group.view if scaffolded else EMPTY_VIEW, scaffolded=scaffolded)

    def _view_of_step(self, task: Task, step: int) -> ScaffoldView:
        """The view of the version step `step` plays: the current one when the step's first group
        pins it; a group verl adds to the step later (a refill, trainer.v1.sampler.
        sync_refill_failed_groups) gets that same version even after the step's review revised it."""
        store = self.scaffold.store
        if store is None:
            return self.scaffold.view(task)
        number = self.played.setdefault(step, store.current.number)
        return store.pin(task, None if number == store.current.number else number)

    def _check_first(self, step: int, expected: int) -> None:
        """The first pin of a started or resumed service is of the step after the restored one
        (`expected`), or the scaffold would not match the policy verl restored."""
        self.first_step = None
        if step != expected:
            self.stopped = PrerequisiteError(
                f"verl plays step {step} (global step {step + 1}) but the scaffold service restored "
                f"the scaffold of step {expected - 1} (from {self.run_dir / TRACKER}); they "
                "disagree when verl resumes from another checkpoint (trainer.resume_from_path, "
                "trainer.resume_mode) than its latest. Let verl resume from its latest checkpoint "
                "(trainer.resume_mode=auto), or write the global step it resumes from into the tracker "
                "file so the service restores that step"
            )
            raise self.stopped

    async def view(self, task_json: str) -> ScaffoldView:
        """The current scaffold's view of a task (validation with the scaffold), once the reviews of the
        steps played so far are done: verl validates after a step's rollouts (the sync trainer), while
        that step's review may still run, and the view would be the old or the new version by timing.
        Waiting gives the version the next step plays."""
        for step in sorted({g.step for g in self.groups.values()}):
            self._start_review(step)  # a step with a failed group never completes on its own
        await self.wait_reviews()
        if self.stopped is not None:
            raise self.stopped
        return self.scaffold.view(Task.model_validate_json(task_json))

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

    async def stop_reason(self, global_steps: int | None = None) -> str | None:
        """Why the service stopped the run, or None: verl's trainer asks (pats.backends.verl.sampler) and
        ends the job with it, since verl only logs the failed groups of pins that raise. A step's failed
        review stops the steps after it (`global_steps` from `stopped_from`): its own step trains on."""
        if self.stopped is None or (global_steps is not None and global_steps < self.stopped_from):
            return None
        return f"{type(self.stopped).__name__}: {self.stopped}"

    async def stop(self, reason: str) -> None:
        """Stop the run (an agent loop that cannot play its rows, e.g. a first prompt too long)."""
        if self.stopped is None:
            logger.error("%s", reason)
            self.stopped = PrerequisiteError(reason)

    async def state(self) -> ServiceState:
        store = self.scaffold.store
        current = store.current if store else None
        return ServiceState(
            version=current.number if current else 0,
            hash=current.hash if current else "",
            judge=self.scaffold.judge_state(),
            reviewed_steps=tuple(sorted(self.reviewed)),
            open_groups=len(self.groups),
            late_reports=self.late_reports,
            failed_reviews_in_a_row=self.end.failed_in_a_row,
        )

    async def wait_reviews(self) -> None:
        """Wait for reviews in flight (the end of a run; tests)."""
        for review in list(self.reviews.values()):
            await review

    # -- reviews -----------------------------------------------------------------------------

    def _start_review(self, step: int) -> None:
        taken = {uid: g for uid, g in self.groups.items() if g.step == step}
        for uid in taken:
            del self.groups[uid]
        if step in self.reviews or step in self.reviewed:
            # Groups pinned after the step's review began (refills): their reports count as late.
            self.late_reports += sum(len(g.rollouts) for g in taken.values())
            return
        self.reviews[step] = asyncio.create_task(self._review(step, list(taken.values())))

    async def _review(self, step: int, taken: list[_Group]) -> None:
        from pats.metrics import group_metrics

        groups = [
            RolloutGroup(step=step, task=g.task, scaffold_version=g.view.version, rollouts=tuple(g.rollouts))
            for g in taken
            if g.rollouts
        ]
        try:
            committed = self.end.commit(step, await self.end.review(step, groups))
        except TrainingError as err:  # k failed reviews in a row: the next pin stops verl's job
            logger.error("%s", err)
            self.stopped, self.stopped_from = err, step + 2  # pats step s is global step s + 1
            self.reviews.pop(step, None)
            return
        metrics = {**group_metrics(groups, self.scaffold.view_entries), **committed.metrics}
        self.end.log(step, groups, committed, metrics)
        self.end.end(step, metrics)
        self.reviewed.add(step)
        self.reviews.pop(step, None)


def _wandb(spec, run_dir: Path) -> list:
    if spec.logging.wandb == "disabled":
        return []
    from pats.logging.sinks import WandbSink

    config = spec.model_dump(mode="json")
    name, log = f"{spec.name}-scaffold", spec.logging
    return [WandbSink(run_dir, log.project, log.entity, log.wandb, name, config, group=spec.name)]


class RayServiceClient:
    """The agent loops' view of the service actor: the same async methods, over Ray."""

    def __init__(self, handle):
        self.handle = handle

    async def pin(self, uid: str, task_json: str, global_steps: int) -> Pinned:
        return await self.handle.pin.remote(uid, task_json, global_steps)

    async def view(self, task_json: str) -> ScaffoldView:
        return await self.handle.view.remote(task_json)

    async def report(self, uid: str, rollout_json: str) -> None:
        await self.handle.report.remote(uid, rollout_json)

    async def state(self) -> ServiceState:
        return await self.handle.state.remote()

    async def stop(self, reason: str) -> None:
        await self.handle.stop.remote(reason)

    def stop_reason_now(self, global_steps: int | None = None) -> str | None:
        """`stop_reason`, blocking: for verl's trainer, whose replay buffer is synchronous."""
        import ray

        return ray.get(self.handle.stop_reason.remote(global_steps))

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
