"""The end of a training step, one owner for both trainers (the local engine, verl's scaffold service):
review -> commit -> events -> metrics -> sinks -> scaffold state, with one failure policy and one
resume rule.

Failure policy. A review that raises (a bug in a judge, reviser or card builder: the review's own
answers for bad LLM output are refusals and fallbacks, see pats.review) is logged with its cause (a
`review_failed` event, `review/failed` in the step's metrics, a line on stderr); the judge's state is
put back as it was before the review, and the step ends with the current scaffold, so training goes
on. `scaffold.max_failed_reviews` failed reviews in a row stop the run with a `TrainingError` that
names the last cause, before that step ends (a resume redoes it).

Resume rule. A resumed run continues from the policy's checkpoint of step s, so everything on the
scaffold side is cut back to the end of step s (`restore`): scaffold versions written after it are
removed, the judge's state is the one of step s, and events.jsonl and metrics.jsonl lose the lines of
later steps. Without a checkpoint everything is cut back to before step 0. The scaffold side of step
s (`ScaffoldState`) comes from the local checkpoint (`Checkpoint.scaffold_state`), and under verl from
`scaffold/steps/NNNNNN.json`, which the step end writes after each step's end
(`pats.backends.verl.service.resume_state` refuses to start when verl's checkpoint has no such file).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pats.build import build_scaffold_policy
from pats.errors import TrainingError
from pats.fileio import write_atomic
from pats.logging.events import EventLog, write_review
from pats.logging.sinks import JsonlSink
from pats.protocols import MetricSink, TokenCounter
from pats.review import Committed, ScaffoldPolicy
from pats.spec.models import ExperimentSpec
from pats.types import ReviewResult, RolloutGroup, ScaffoldState, Task

STATES = Path("scaffold") / "steps"  # under the run directory: each step's ScaffoldState


@dataclass(frozen=True)
class Reviewed:
    """A step's review as it ended: its result, or the cause (`error`, `where`) of the exception it
    raised; `start`/`end` are perf_counter seconds of the review's own run."""

    result: ReviewResult | None
    start: float
    end: float
    error: str = ""  # "TypeError: ..." when the review raised
    where: str = ""  # "file:line in function" of the innermost frame of that exception


@dataclass
class StepEnd:
    scaffold: ScaffoldPolicy
    events: EventLog
    sinks: Sequence[MetricSink] = ()
    max_failed_reviews: int = 3
    states: Path | None = None  # where each step's ScaffoldState is written (None: not written)
    failed_in_a_row: int = 0

    async def review(self, step: int, groups: Sequence[RolloutGroup]) -> Reviewed:
        """The step's review; never raises (but for cancellation): a failure comes back as its cause."""
        before = self.scaffold.judge_state()
        start = time.perf_counter()
        try:
            result = await self.scaffold.review(step, groups)
        except Exception as err:  # any bug below the review; the failure policy decides what follows
            self.scaffold.load_judge_state(before)  # the judge may have counted half the step
            frame = traceback.extract_tb(err.__traceback__)[-1]
            where = f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
            return Reviewed(None, start, time.perf_counter(), f"{type(err).__name__}: {err}", where)
        return Reviewed(result, start, time.perf_counter())

    def commit(self, step: int, reviewed: Reviewed) -> Committed:
        """The review's edits as the next version (pats.review.ScaffoldPolicy.commit); a failed review
        keeps the current version, is logged, and stops the run once it is the k-th in a row."""
        if reviewed.result is not None:
            self.failed_in_a_row = 0
            committed = self.scaffold.commit(reviewed.result, step)
            return replace(committed, metrics={**committed.metrics, "review/failed": 0.0})
        self.failed_in_a_row += 1
        n, k = self.failed_in_a_row, self.max_failed_reviews
        self.events.write(step, "review_failed", error=reviewed.error, where=reviewed.where, in_a_row=n)
        self.events.flush()
        if n >= k:
            raise TrainingError(
                f"step {step}: {n} reviews in a row raised, so the run stopped (its last checkpoint is "
                f"intact); the last: {reviewed.error} (at {reviewed.where}); the others are the "
                f"review_failed events in {self.events.path}. Fix the judge, reviser or card builder "
                "named there (or raise scaffold.max_failed_reviews), then `pats run --resume` the run "
                "directory"
            )
        print(
            f"warning: step {step}: the scaffold review raised {reviewed.error} (at {reviewed.where}); "
            f"the step trains on with the current scaffold ({n} in a row, the run stops at {k})",
            file=sys.stderr,
            flush=True,
        )
        nothing = ReviewResult(step=step, cards=(), assessments=(), edits=())
        committed = self.scaffold.commit(nothing, step)
        return replace(committed, metrics={**committed.metrics, "review/failed": 1.0})

    def log(
        self, step: int, groups: Sequence[RolloutGroup], committed: Committed, metrics: dict[str, float]
    ) -> None:
        """The step's groups, review and new version to the event log; its metrics to every sink."""
        write_review(self.events, step, groups, committed.result, committed.version)
        # on disk before the evaluation that may follow (an hour on a loaded CPU): `pats sweep status`
        # reads a step whose review is logged and whose end is not as evaluating
        self.events.flush()
        for sink in self.sinks:
            sink.log(step, metrics)
            if committed.version is not None:
                sink.scaffold(step, committed.version)

    def end(self, step: int, metrics: dict[str, float]) -> None:
        """The step is finished: its `step_end` line on disk, then (where kept) its scaffold state."""
        self.events.end_step(step, metrics=metrics)
        if self.states is not None:
            write_atomic(self.states / f"{step:06d}.json", self.state(step).model_dump_json(indent=1))

    def state(self, step: int) -> ScaffoldState:
        store = self.scaffold.store
        return ScaffoldState(
            step=step,
            scaffold_version=store.current.number if store is not None else 0,
            judge=self.scaffold.judge_state(),
        )


def restore(
    spec: ExperimentSpec,
    run_dir: Path,
    count_tokens: TokenCounter,
    expert_plan: Callable[[Task], Sequence[str] | None] | None = None,
    task_types: Sequence[str] | None = None,
    state: ScaffoldState | None = None,
    keep_states: bool = False,
) -> StepEnd:
    """The run's step end, its scaffold side cut back to `state` (the step of the policy's checkpoint;
    None: before step 0), see the resume rule in the module docstring. Its sinks: metrics.jsonl."""
    step = state.step if state is not None else -1
    scaffold = build_scaffold_policy(
        spec,
        run_dir / "scaffold",
        count_tokens,
        expert_plan,
        task_types=task_types,
        upto_version=state.scaffold_version if state is not None else 0,
    )
    if state is not None:
        scaffold.load_judge_state(state.judge)
    for later in sorted((run_dir / STATES).glob("*.json")):
        if int(later.stem) > step:  # written by steps the resumed run redoes
            later.unlink()
    return StepEnd(
        scaffold=scaffold,
        events=EventLog(run_dir / "events.jsonl", keep_through=step),
        sinks=[JsonlSink(run_dir / "metrics.jsonl", keep_through=step)],
        max_failed_reviews=spec.scaffold.max_failed_reviews,
        states=_mkdir(run_dir / STATES) if keep_states else None,
    )


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
