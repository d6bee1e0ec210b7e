"""The training loop of DESIGN.md, one screen: rollout -> (review || update) -> apply -> log.

The review of step t runs concurrently with the policy update of step t (both on the same groups);
the step ends through `pats.step_end.StepEnd`, the same object verl's scaffold service ends its steps
with: its edits are committed before step t+1 pins its views, a review that raises is logged and the
step trains on with the current scaffold (k in a row stop the run), then events, metrics and sinks.
Components are built from the spec before the loop starts (pats.build), so nothing here branches on a
mode.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pats.engine.batches import in_batches
from pats.engine.sampler import TaskSampler
from pats.errors import TrainingError
from pats.logging.events import EventLog
from pats.metrics import group_metrics, rollout_metrics, task_outcomes
from pats.protocols import MetricSink, Played, PolicyBackend
from pats.review import ScaffoldPolicy
from pats.spec.models import ExperimentSpec
from pats.step_end import StepEnd
from pats.types import EMPTY_VIEW, Rollout, ScaffoldView, Task, UpdateStats


@dataclass
class Engine:
    spec: ExperimentSpec
    backend: PolicyBackend
    scaffold: ScaffoldPolicy  # its parts chosen once from the spec (pats.build)
    sampler: TaskSampler
    eval_tasks: Sequence[Task]
    events: EventLog
    sinks: Sequence[MetricSink] = ()
    checkpoint: Callable[[int], None] | None = None  # called after a step's end is on disk
    stop_requested: bool = False  # set by a signal handler: stop at the next step boundary
    nonfinite_in_a_row: int = 0
    # The response-likelihood gap at each evaluation: view_for(task) or None (no scaffold: the
    # no-scaffold expert NLL only) -> metrics (see pats/backends/local/reliance.py); None where the
    # policy does not score actions.
    likelihood_gap: Callable[[Callable[[Task], ScaffoldView] | None], dict[str, float]] | None = None
    # The training pool, played without the scaffold at each evaluation (eval.pool); () when off.
    pool_tasks: Sequence[Task] = ()

    async def run(self, start_step: int = 0) -> int | None:
        """Train from `start_step`; returns the last finished step when a stop was requested early."""
        tr, probes = self.spec.local_trainer(), self.spec.probe_count()
        end = StepEnd(self.scaffold, self.events, self.sinks, self.spec.scaffold.max_failed_reviews)
        if start_step == 0 and self.spec.eval.at_start:
            await self.evaluate(-1)
        for step in range(start_step, tr.steps):
            t0 = time.perf_counter()
            plans = self.scaffold.plan(self.sampler.sample(step), tr.group_size, probes)
            played = await self.backend.rollout(step, plans)
            groups = [p.group for p in played]
            t1 = time.perf_counter()
            review = asyncio.create_task(end.review(step, groups))
            trained = trainable(played, tr.on_env_fault)
            stats = await self.backend.update(trained)
            await self._check_update(step, stats, review)
            t2 = time.perf_counter()
            reviewed = await review
            committed = end.commit(step, reviewed)  # raises after k failed reviews in a row
            t3 = time.perf_counter()
            metrics = {
                **group_metrics(groups, self.scaffold.view_entries),
                **stats.metrics(),
                **committed.metrics,
                "time/rollout_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/review_s": reviewed.end - reviewed.start,
                # The part of the review that ran while the update did (the update ends at t2).
                "time/review_overlap_s": max(0.0, min(reviewed.end, t2) - max(reviewed.start, t1)),
                "time/step_s": t3 - t0,
                "train/env_fault_groups_dropped": float(len(groups) - len(trained)),
            }
            end.log(step, groups, committed, metrics)
            if self.spec.evaluates_after(step):
                await self.evaluate(step)
            end.end(step, metrics)
            due = (step + 1) % tr.checkpoint_every == 0 or step + 1 == tr.steps
            if self.checkpoint and (due or self.stop_requested):
                self.checkpoint(step)
            if self.stop_requested and step + 1 < tr.steps:
                return step
        return None

    async def _check_update(self, step: int, stats: UpdateStats, review: asyncio.Task) -> None:
        """Count updates skipped for a NaN/inf loss or gradient; stop after k in a row."""
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if stats.dropped_for_nonfinite else 0
        if self.nonfinite_in_a_row >= self.spec.local_trainer().max_nonfinite_updates:
            await asyncio.gather(review, return_exceptions=True)  # bounded by the review budget
            raise TrainingError(
                f"step {step}: {self.nonfinite_in_a_row} updates in a row had a NaN/inf loss or gradient "
                "and were skipped, so the run stopped (its last checkpoint is intact). Try a lower "
                "trainer.lr or trainer.max_grad_norm, trainer.autocast_bf16=false, or check the "
                "rewards for NaN; then `pats run --resume` the run directory"
            )

    async def play(self, tasks: Sequence[Task], views: Sequence[ScaffoldView]) -> list[Rollout]:
        """Evaluation episodes, spec.eval_batch() games at a time (one environment per episode in flight)."""
        return await in_batches(self.backend, tasks, views, self.spec.eval_batch(), "", lambda line: None)

    async def evaluate(self, step: int) -> dict[str, float]:
        """Held-out tasks without the scaffold (deployment), and with it for the reliance gap; the
        training pool without it (eval.pool); the expert actions' likelihood with and without it."""
        bare = await self.play(self.eval_tasks, [EMPTY_VIEW] * len(self.eval_tasks))
        metrics = rollout_metrics(bare, "eval")
        outcomes = {"outcomes": task_outcomes(bare)}  # by game, for `pats compare`
        wanted = self.spec.eval.with_scaffold and self.scaffold.store is not None
        views = [self.scaffold.view(t) for t in self.eval_tasks] if wanted else []
        # An empty scaffold (before the first edit) leaves every prompt the bare one: nothing to measure.
        if views and not all(v.empty for v in views):
            scaffolded = await self.play(self.eval_tasks, views)
            with_scaffold = rollout_metrics(scaffolded, "eval_with_scaffold")
            outcomes["outcomes_with_scaffold"] = task_outcomes(scaffolded)
            metrics.update(with_scaffold)
            metrics["eval/reliance_gap"] = (
                with_scaffold["eval_with_scaffold/success"] - metrics["eval/success"]
            )
        if self.pool_tasks:
            none = [EMPTY_VIEW] * len(self.pool_tasks)
            metrics |= rollout_metrics(await self.play(self.pool_tasks, none), "pool")
        if self.likelihood_gap is not None:
            view_for = self.scaffold.view if self.scaffold.store is not None else None
            metrics |= await asyncio.to_thread(self.likelihood_gap, view_for)
        self.events.write(step, "eval", metrics=metrics, **outcomes)
        for sink in self.sinks:
            sink.log(max(step, 0), metrics)
        return metrics


def trainable(played: Sequence[Played], on_env_fault: str) -> list[Played]:
    """The groups the update sees: with `drop`, none whose environment failed during a rollout (its
    reward says nothing about the policy); the review sees every group either way."""
    if on_env_fault == "train":
        return list(played)
    return [p for p in played if not any(r.error for r in p.group.rollouts)]
