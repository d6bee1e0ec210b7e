"""Faults a long run must survive without losing finished work: a stop signal, a full disk, NaN
updates, environments that fail mid-episode, and an LLM that answers too slowly for the step.

These use the scripted backend and fake environment (fast, no model); tests/test_kill_resume.py kills
a real run with SIGKILL and kills a real TextWorldExpress JVM mid-run."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal

import pytest

from pats.build import build_scaffold_policy
from pats.engine import run as run_module
from pats.engine.loop import Engine, trainable
from pats.engine.run import new_run, resume, train
from pats.errors import RunInterrupted, TrainingError
from pats.logging.events import ReviewFailedEvent, StepEndEvent, VersionEvent, read_events
from pats.spec.models import ExperimentSpec
from pats.testing import FakeEnv, ScriptedBackend, ScriptedOpenAIServer, improving_schedule
from pats.testing.engine import fake_engine
from pats.types import UpdateStats


def make_spec(root, **trainer) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "reliability",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats"},
            "trainer": {"steps": 4, "tasks_per_step": 2, "group_size": 4, "checkpoint_every": 1, **trainer},
            "eval": {"every": 100, "at_start": False, "with_scaffold": False, "num_tasks": 2},
            "logging": {"root": str(root), "wandb": "disabled", "progress": False},
        }
    )


@pytest.fixture
def fake_run(monkeypatch):
    """`train` with FakeEnv and a ScriptedBackend (built by `make`) in place of the real ones."""
    backends: list[ScriptedBackend] = []

    def use(make=lambda: ScriptedBackend(improving_schedule(), seed=3)):
        monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))

        def make_backend(spec, make_env):
            backends.append(make())
            backends[-1].close = _no_close
            return backends[-1]

        monkeypatch.setattr(run_module, "make_backend", make_backend)
        return backends

    return use


async def _no_close() -> None:
    return None


def steps_logged(run_dir) -> list[int]:
    return [e.step for e in read_events(run_dir / "events.jsonl", StepEndEvent)]


def latest_step(run_dir) -> int:
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]


class SignalAtStep(ScriptedBackend):
    """Sends this process `signum` `times` times while rolling out step `at`."""

    def __init__(self, at: int, signum: int, times: int = 1):
        super().__init__(improving_schedule(), seed=3)
        self.at, self.signum, self.times = at, signum, times

    async def rollout(self, step, plans):
        if step == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)
                await asyncio.sleep(0.05)  # let the loop run the handler while the step is in flight
        return await super().rollout(step, plans)


def test_sigterm_finishes_the_step_checkpoints_and_resumes_without_gaps(tmp_path, fake_run):
    fake_run(lambda: SignalAtStep(at=1, signum=signal.SIGTERM))
    spec = make_spec(tmp_path, checkpoint_every=10)  # the stop must checkpoint on its own
    run_dir = new_run(spec)
    with pytest.raises(RunInterrupted) as info:
        asyncio.run(train(spec, run_dir))
    assert info.value.exit_code == 128 + signal.SIGTERM
    assert "after step 1" in str(info.value) and f"pats run --resume {run_dir}" in str(info.value)
    assert steps_logged(run_dir) == [0, 1] and latest_step(run_dir) == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handler must be removed again"

    fake_run()
    resume(run_dir)
    assert steps_logged(run_dir) == [0, 1, 2, 3]


def test_a_second_sigint_stops_at_once_and_loses_only_the_step_in_flight(tmp_path, fake_run):
    fake_run(lambda: SignalAtStep(at=2, signum=signal.SIGINT, times=2))
    spec = make_spec(tmp_path)
    run_dir = new_run(spec)
    with pytest.raises(RunInterrupted) as info:
        asyncio.run(train(spec, run_dir))
    assert "second signal" in str(info.value) and info.value.exit_code == 128 + signal.SIGINT
    assert latest_step(run_dir) == 1
    fake_run()
    resume(run_dir)
    assert steps_logged(run_dir) == [0, 1, 2, 3]


class FullDisk(ScriptedBackend):
    def save(self, directory):
        if self.updates >= 3:  # the checkpoint of step 2
            raise OSError(errno.ENOSPC, "No space left on device", str(directory))
        super().save(directory)


def test_a_full_disk_stops_cleanly_with_the_last_checkpoint_intact(tmp_path, fake_run):
    fake_run(lambda: FullDisk(improving_schedule(), seed=3))
    spec = make_spec(tmp_path)
    run_dir = new_run(spec)
    with pytest.raises(TrainingError) as info:
        asyncio.run(train(spec, run_dir))
    message = str(info.value)
    assert "disk is full" in message and "last checkpoint is step 1" in message
    assert latest_step(run_dir) == 1 and (run_dir / "checkpoints" / "step_000001" / "state.json").is_file()
    fake_run()
    resume(run_dir)
    assert steps_logged(run_dir) == [0, 1, 2, 3]


class Nonfinite(ScriptedBackend):
    """Update outcomes in order: True = skipped for NaN/inf, False = a normal update."""

    def __init__(self, pattern):
        super().__init__(improving_schedule(), seed=3)
        self.pattern = list(pattern)

    async def update(self, played):
        await super().update(played)
        bad = self.pattern.pop(0)
        return UpdateStats(nonfinite=float(bad), steps=0.0 if bad else 1.0)


def engine_for(tmp_path, count_tokens, backend, **trainer) -> Engine:
    return fake_engine(make_spec(tmp_path, **trainer), tmp_path, backend, count_tokens, eval_tasks=2)


def test_nonfinite_updates_stop_the_run_only_when_k_come_in_a_row(tmp_path, count_tokens):
    ok = engine_for(
        tmp_path / "a", count_tokens, Nonfinite([True, False, True, False]), max_nonfinite_updates=2
    )
    asyncio.run(ok.run())
    assert [e.step for e in read_events(tmp_path / "a" / "events.jsonl", StepEndEvent)] == [0, 1, 2, 3]

    bad = engine_for(
        tmp_path / "b", count_tokens, Nonfinite([False, True, True, False]), max_nonfinite_updates=2
    )
    with pytest.raises(TrainingError, match="2 updates in a row.*trainer.lr"):
        asyncio.run(bad.run())
    bad.events.close()
    # Step 2 was never finished: nothing of it is in the log, so a resume redoes it.
    assert [e.step for e in read_events(tmp_path / "b" / "events.jsonl", StepEndEvent)] == [0, 1]


class EnvFaults(ScriptedBackend):
    """The first rollout of every group on task 0 ends with an environment fault."""

    def __init__(self):
        super().__init__(improving_schedule(), seed=3)
        self.trained: list[list[str]] = []

    def _play(self, rid, task, view, scaffolded):
        rollout = super()._play(rid, task, view, scaffolded)
        if rid.endswith("-0") and task.id == self._faulty:
            return rollout.model_copy(update={"error": "environment died: JVM gone"})
        return rollout

    async def rollout(self, step, plans):
        self._faulty = plans[0].task.id
        return await super().rollout(step, plans)

    async def update(self, played):
        self.trained.append([p.group.task.id for p in played])
        return await super().update(played)


@pytest.mark.parametrize("rule", ["drop", "train"])
def test_groups_with_an_environment_fault_follow_the_spec_rule(tmp_path, count_tokens, rule):
    backend = EnvFaults()
    engine = engine_for(tmp_path, count_tokens, backend, on_env_fault=rule, steps=2)
    asyncio.run(engine.run())
    engine.events.close()
    ends = read_events(tmp_path / "events.jsonl", StepEndEvent)
    dropped = [e.metrics["train/env_fault_groups_dropped"] for e in ends]
    assert [len(t) for t in backend.trained] == ([1, 1] if rule == "drop" else [2, 2])
    assert dropped == ([1.0, 1.0] if rule == "drop" else [0.0, 0.0])
    assert all(e.metrics["train/errors"] == 1.0 for e in ends)  # the review still sees them


def test_trainable_keeps_groups_without_errors(tmp_path):
    from pats.protocols import Played
    from pats.types import Rollout, RolloutGroup, Task

    task = Task(id="t", type="x", split="train", env="fake")
    clean = Rollout(
        id="a", task_id="t", scaffolded=True, scaffold_version="", turns=(), reward=1.0, success=True
    )
    broken = clean.model_copy(update={"id": "b", "error": "reset failed"})
    good = Played(RolloutGroup(step=0, task=task, scaffold_version="", rollouts=(clean, clean)))
    bad = Played(RolloutGroup(step=0, task=task, scaffold_version="", rollouts=(clean, broken)))
    assert trainable([good, bad], "drop") == [good]
    assert trainable([good, bad], "train") == [good, bad]


def test_a_slow_llm_reviser_is_cut_off_at_the_step_budget(tmp_path, count_tokens, monkeypatch):
    """The server answers each request after 60 s (under the 120 s client timeout): with a 1 s review
    budget the rules reviser answers instead and the cut is counted; the step does not wait (had it
    waited, the LLM reviser's answer would have come and nothing would be over budget)."""
    monkeypatch.setenv("PATS_TEST_KEY", "sk-test")
    env = FakeEnv(num_tasks=4)
    with ScriptedOpenAIServer([{"delay": 60.0, "text": "[]"}] * 20) as server:
        spec = ExperimentSpec.model_validate(
            {
                "name": "budget",
                "environment": {"kind": "twx"},
                "scaffold": {"mode": "pats", "review_budget_s": 1.0},
                "reviser": {
                    "kind": "llm",
                    "llm": {
                        "model": "openai/scripted",
                        "api_base": server.base_url,
                        "api_key_env": "PATS_TEST_KEY",
                        "timeout_s": 120.0,
                        "max_retries": 0,
                    },
                },
                "trainer": {"steps": 1, "tasks_per_step": 2, "group_size": 4},
                "eval": {"every": 10, "at_start": False, "with_scaffold": False},
            }
        )
        scaffold = build_scaffold_policy(spec, tmp_path / "scaffold", count_tokens, env.expert_plan)
        played = asyncio.run(
            ScriptedBackend(improving_schedule(), seed=1).rollout(
                0, scaffold.plan(env.tasks("train")[:2], 4, spec.probe_count())
            )
        )
        groups = [p.group for p in played]
        result = asyncio.run(scaffold.review(0, groups))
    assert result.over_budget >= 1 and result.fallback
    assert any("review budget" in note for note in result.refused)
    assert result.edits, "the rules reviser should have answered within the step"


def raising_judge(monkeypatch, at) -> None:
    import pats.build
    from pats.judges import StatsJudge
    from pats.testing import RaisingJudge

    monkeypatch.setattr(
        pats.build, "build_judge", lambda spec: RaisingJudge(StatsJudge(spec.judge, spec.scaffold.budget), at)
    )


def test_a_review_that_raises_is_logged_and_the_run_trains_on(tmp_path, fake_run, monkeypatch, capsys):
    fake_run()
    raising_judge(monkeypatch, at=[2, 3])
    spec = make_spec(tmp_path)  # scaffold.max_failed_reviews: 3 by default
    run_dir = new_run(spec)
    asyncio.run(train(spec, run_dir))

    log = run_dir / "events.jsonl"
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    failed = read_events(log, ReviewFailedEvent)
    assert [(e.step, e.in_a_row) for e in failed] == [(2, 1), (3, 2)]
    assert failed[0].error == "RuntimeError: judge bug at step 2"
    assert failed[0].where.startswith("fakes.py:") and failed[0].where.endswith("in assess")
    ends = read_events(log, StepEndEvent)
    assert [e.metrics["review/failed"] for e in ends] == [0.0, 0.0, 1.0, 1.0]
    assert not [e for e in read_events(log, VersionEvent) if e.step >= 2], "the scaffold stays as it was"
    assert "the scaffold review raised RuntimeError: judge bug at step 2" in capsys.readouterr().err
    # The judge's state is put back as it was before a failed review: steps 2 and 3 end with the
    # state of step 1, though the judge counted both steps before it raised.
    states = [
        json.loads((run_dir / "checkpoints" / f"step_{s:06d}" / "state.json").read_text()) for s in (2, 3)
    ]
    assert states[0]["judge"]["ema"] and states[0]["judge"] == states[1]["judge"]


def test_k_failed_reviews_in_a_row_stop_the_run_with_the_cause(tmp_path, fake_run, monkeypatch):
    fake_run()
    # Step 0 fails, step 1 succeeds (the count starts again), steps 2 and 3 fail: the 2nd in a row is
    # step 3. A count that a success does not reset would stop the run at step 2 instead.
    raising_judge(monkeypatch, at=[0, 2, 3])
    spec = ExperimentSpec.model_validate(
        {**make_spec(tmp_path).model_dump(mode="json"), "scaffold": {"mode": "pats", "max_failed_reviews": 2}}
    )
    run_dir = new_run(spec)
    with pytest.raises(TrainingError, match=r"step 3: 2 reviews in a row raised") as info:
        asyncio.run(train(spec, run_dir))
    message = str(info.value)
    assert "RuntimeError: judge bug at step 3" in message and "scaffold.max_failed_reviews" in message
    assert "pats run --resume" in message
    # Step 3 never ended, so a resume redoes it; the checkpoint of step 2 is intact.
    assert steps_logged(run_dir) == [0, 1, 2] and latest_step(run_dir) == 2
    failed = read_events(run_dir / "events.jsonl", ReviewFailedEvent)
    assert [(e.step, e.in_a_row) for e in failed] == [(0, 1), (2, 1), (3, 2)]
