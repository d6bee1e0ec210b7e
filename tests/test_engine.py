"""The engine loop with the scripted backend: the scaffold follows the policy, modes hold, the
review overlaps the update, and the event log records every step."""

from __future__ import annotations

import asyncio
import time

import pytest

from pats.build import build_scaffold_policy
from pats.engine.sampler import TaskSampler
from pats.logging.events import CardEvent, EditEvent, EvalEvent, EventLog, StepEndEvent, read_events
from pats.spec.models import ExperimentSpec
from pats.testing.engine import fake_engine
from pats.testing.fakes import FakeEnv, ScriptedBackend, improving_schedule


def make_spec(**scaffold) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "engine-test",
            "environment": {"kind": "twx", "num_eval_tasks": 4},
            "scaffold": {
                "mode": "pats",
                "budget": {"max_entries": 12, "max_tokens": 600, "view_tokens": 300},
                **scaffold,
            },
            "trainer": {"steps": 30, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 10, "at_start": False},
        }
    )


make_engine = fake_engine


def entries_per_step(path):
    return [e.metrics["scaffold/entries"] for e in read_events(path, StepEndEvent)]


def test_scaffold_grows_while_policy_fails_and_shrinks_as_it_succeeds(tmp_path, count_tokens):
    spec = make_spec()
    backend = ScriptedBackend(improving_schedule(start=0.05, gain=0.04), seed=1)
    engine = make_engine(spec, tmp_path, backend, count_tokens)
    asyncio.run(engine.run())
    engine.events.close()

    sizes = entries_per_step(tmp_path / "events.jsonl")
    assert len(sizes) == 30
    peak = max(sizes)
    assert peak >= 2, f"the scaffold never grew while the policy failed: {sizes}"
    assert sizes.index(peak) < 20, f"the scaffold peaked only late: {sizes}"
    assert sizes[-1] < peak, f"the scaffold did not shrink as the policy succeeded: {sizes}"
    ops = [e.edit.op for e in read_events(tmp_path / "events.jsonl", EditEvent)]
    assert "ADD" in ops and "DELETE" in ops


def test_removal_off_never_deletes(tmp_path, count_tokens):
    spec = make_spec(removal=False)
    engine = make_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=1), count_tokens)
    asyncio.run(engine.run())
    engine.events.close()
    ops = [e.edit.op for e in read_events(tmp_path / "events.jsonl", EditEvent)]
    assert "ADD" in ops and "DELETE" not in ops
    sizes = entries_per_step(tmp_path / "events.jsonl")
    assert sizes == sorted(sizes), "without removal the scaffold can only grow"


def test_mode_none_never_builds_a_scaffold(tmp_path, count_tokens):
    spec = make_spec(mode="none")
    scaffold = build_scaffold_policy(spec, tmp_path / "scaffold", count_tokens)
    assert scaffold.store is None and scaffold.reviewer is None
    backend = ScriptedBackend(improving_schedule(), seed=1)
    engine = make_engine(spec, tmp_path, backend, count_tokens, scaffold=scaffold)
    asyncio.run(engine.run())
    engine.events.close()
    assert {version for _, _, version in backend.seen_views} == {""}
    assert read_events(tmp_path / "events.jsonl", EditEvent) == []
    assert read_events(tmp_path / "events.jsonl", CardEvent) == []
    assert not (tmp_path / "scaffold").exists()
    # No "with / without scaffold" split where there is no scaffold: only the training success.
    metrics = [e.metrics for e in read_events(tmp_path / "events.jsonl", StepEndEvent)]
    assert all("train/success" in m for m in metrics)
    assert not any(
        k.startswith(("train_with_scaffold/", "train_without_scaffold/")) for m in metrics for k in m
    )


def test_every_rollout_of_a_group_sees_one_version(tmp_path, count_tokens):
    spec = make_spec(probe_fraction=0.0, cards=["outcome", "contrast", "failure"])
    backend = ScriptedBackend(improving_schedule(), seed=2)
    engine = make_engine(spec, tmp_path, backend, count_tokens)
    asyncio.run(engine.run())
    by_group: dict[tuple, set] = {}
    for step, task_id, version in backend.seen_views:
        by_group.setdefault((step, task_id), set()).add(version)
    assert all(len(v) == 1 for v in by_group.values())
    assert len({v for vs in by_group.values() for v in vs}) > 1, "the version never changed"
    # The with / without split is reported exactly for the steps whose groups carried a scaffold.
    carried = {step for step, _, version in backend.seen_views if version}
    ends = read_events(tmp_path / "events.jsonl", StepEndEvent)
    assert carried and all(("train_with_scaffold/success" in e.metrics) == (e.step in carried) for e in ends)


class SlowReviser:
    """Wraps a reviser and takes `delay` seconds of wall time, like an LLM call; keeps each call's
    (step, start, end), times in perf_counter seconds."""

    def __init__(self, inner, delay):
        self.inner, self.delay, self.calls = inner, delay, []

    async def revise(self, step, *args, **kwargs):
        start = time.perf_counter()
        await asyncio.sleep(self.delay)
        out = await self.inner.revise(step, *args, **kwargs)
        self.calls.append((step, start, time.perf_counter()))
        return out

    def usage(self):
        return self.inner.usage()


class TimedBackend(ScriptedBackend):
    """Keeps each update's (start, end) in perf_counter seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates_at = []

    async def update(self, played):
        start = time.perf_counter()
        stats = await super().update(played)
        self.updates_at.append((start, time.perf_counter()))
        return stats


def test_review_overlaps_the_update(tmp_path, count_tokens):
    spec = make_spec()
    spec = spec.model_copy(update={"trainer": spec.trainer.model_copy(update={"steps": 3})})
    scaffold = build_scaffold_policy(spec, tmp_path / "scaffold", count_tokens, FakeEnv().expert_plan)
    reviser = scaffold.reviewer.reviser = SlowReviser(scaffold.reviewer.reviser, delay=0.5)
    backend = TimedBackend(improving_schedule(), seed=3, update_delay=0.5)
    engine = make_engine(spec, tmp_path, backend, count_tokens, scaffold=scaffold)
    asyncio.run(engine.run())
    # What overlapping means, seen from the two sides themselves (not from the loop's clock, and
    # without a bound on wall time that a loaded machine breaks): in each step the reviser (one call
    # per task type) begins before the update ends, and the update begins before the reviser ends.
    assert len(backend.updates_at) == 3 and {c[0] for c in reviser.calls} == {0, 1, 2}
    for step, (u_start, u_end) in enumerate(backend.updates_at):
        r_start = min(start for s, start, _ in reviser.calls if s == step)
        r_end = max(end for s, _, end in reviser.calls if s == step)
        assert r_start < u_end and u_start < r_end, (step, (r_start, r_end), (u_start, u_end))
    # ... and the step's metrics report it: the overlap is most of the review.
    for end in read_events(tmp_path / "events.jsonl", StepEndEvent):
        m = end.metrics
        assert m["time/update_s"] >= 0.5 and m["time/review_s"] >= 0.5
        assert 0.4 <= m["time/review_overlap_s"] <= m["time/review_s"], m


def test_sampler_depends_only_on_seed_and_step():
    tasks = FakeEnv(num_tasks=20).tasks("train")
    a, b = TaskSampler(tasks, 5, seed=7), TaskSampler(tasks, 5, seed=7)
    assert [t.id for t in a.sample(3)] == [t.id for t in b.sample(3)]
    assert [t.id for t in a.sample(3)] != [t.id for t in a.sample(4)]
    assert [t.id for t in TaskSampler(tasks, 5, seed=8).sample(3)] != [t.id for t in a.sample(3)]


def test_event_log_drops_a_half_written_step(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.write(0, "groups", groups=[])
    log.end_step(0)
    log.write(1, "groups", groups=[])
    log._file.write('{"v": 1, "step": 1, "event": "card", "tor')  # a crash mid-line
    log._file.flush()
    reopened = EventLog(path)
    assert reopened.last_complete_step == 0
    reopened.write(1, "groups", groups=[])
    reopened.end_step(1)
    reopened.close()
    steps = [(e.step, e.event) for e in read_events(path)]
    assert steps == [(0, "groups"), (0, "step_end"), (1, "groups"), (1, "step_end")]


@pytest.mark.parametrize("mode", ["static", "grow"])
def test_static_never_edits_and_grow_only_adds(tmp_path, count_tokens, repo, mode):
    spec = make_spec(mode=mode, initial_bank=str(repo / "experiments/banks/twc.json"))
    engine = make_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=4), count_tokens)
    asyncio.run(engine.run())
    ops = {e.edit.op for e in read_events(tmp_path / "events.jsonl", EditEvent)}
    sizes = entries_per_step(tmp_path / "events.jsonl")
    assert sizes[0] >= 4  # the bank's entries
    if mode == "static":
        assert ops == set() and len(set(sizes)) == 1
    else:
        assert ops == {"ADD"} and sizes == sorted(sizes) and sizes[-1] > sizes[0]


def test_pool_evaluation_plays_the_training_tasks_without_the_scaffold(tmp_path, count_tokens):
    spec = make_spec()
    backend = ScriptedBackend(improving_schedule(), seed=1)
    engine = make_engine(spec, tmp_path, backend, count_tokens)
    pool = FakeEnv(num_tasks=4).tasks("train")
    engine.pool_tasks = pool
    engine.spec = spec.model_copy(update={"trainer": spec.trainer.model_copy(update={"steps": 10})})
    played: list[tuple[str, bool]] = []
    evaluate = backend.evaluate

    async def spy(tasks, views):
        played.extend((t.id, v.empty) for t, v in zip(tasks, views, strict=True))
        return await evaluate(tasks, views)

    backend.evaluate = spy
    asyncio.run(engine.run())
    engine.events.close()
    evals = read_events(tmp_path / "events.jsonl", EvalEvent)
    assert len(evals) == 1 and 0.0 <= evals[0].metrics["pool/success"] <= 1.0
    assert {t.id for t in pool} <= {task for task, empty in played if empty}
    assert all(empty for task, empty in played if task in {t.id for t in pool})
