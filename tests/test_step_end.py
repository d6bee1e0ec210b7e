"""pats.step_end on its own, with a stand-in scaffold (no run, no model): the failure policy (a review
that raises is logged, its judge state put back, k in a row stop the run and a success starts the count
again), what a step's end writes, and the resume rule's cut of the scaffold side. The same policy inside
a real run: tests/test_reliability.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from pats.errors import TrainingError
from pats.logging.events import EventLog, ReviewFailedEvent, StepEndEvent, read_events
from pats.review import Committed
from pats.spec.models import ExperimentSpec, ScaffoldSpec
from pats.step_end import STATES, Reviewed, StepEnd, restore
from pats.types import JudgeState, ReviewResult, ScaffoldState


class StandInScaffold:
    """Counts reviews in its judge state; raises at the steps in `raise_at` after counting."""

    def __init__(self, raise_at=()):
        self.counted, self.raise_at, self.commits, self.store = 0, set(raise_at), [], None

    def judge_state(self) -> JudgeState:
        return JudgeState({"counted": self.counted})

    def load_judge_state(self, state: JudgeState) -> None:
        self.counted = state.root["counted"]

    async def review(self, step, groups):
        self.counted += 1  # a judge that counted half the step before it raised
        self.judge(step)
        return ReviewResult(step=step, cards=(), assessments=(), edits=())

    def judge(self, step):  # a frame below the review's: `where` names the innermost
        if step in self.raise_at:
            raise RuntimeError(f"bug at step {step}")

    def commit(self, result, step):
        self.commits.append((step, result))
        return Committed(result, None, {"scaffold/entries": 2.0})


class Sink:
    def __init__(self):
        self.logged, self.versions = [], []

    def log(self, step, metrics):
        self.logged.append((step, metrics))

    def scaffold(self, step, version):
        self.versions.append((step, version))


def step_end(tmp_path, raise_at=(), k=3, **kw) -> StepEnd:
    return StepEnd(StandInScaffold(raise_at), EventLog(tmp_path / "events.jsonl"), max_failed_reviews=k, **kw)


def test_a_review_that_raises_comes_back_as_its_cause_with_the_judge_state_put_back(tmp_path):
    end = step_end(tmp_path, raise_at=[1])
    ok = asyncio.run(end.review(0, []))
    assert ok.result == ReviewResult(step=0, cards=(), assessments=(), edits=())
    assert (ok.error, ok.where) == ("", ""), "no cause: empty text, as the record says"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok.error = "changed"  # type: ignore[misc]
    assert ok.start <= ok.end and end.scaffold.counted == 1
    failed = asyncio.run(end.review(1, []))
    assert failed.result is None and failed.error == "RuntimeError: bug at step 1"
    assert failed.where.startswith("test_step_end.py:") and failed.where.endswith(" in judge")
    assert failed.start <= failed.end
    assert end.scaffold.counted == 1, "the judge state of before the failed review"


def test_commit_counts_failures_in_a_row_and_a_success_starts_again(tmp_path, capsys):
    end = step_end(tmp_path, k=2)
    fail = Reviewed(None, 0.0, 1.0, "RuntimeError: bug", "x.py:1 in f")
    good = Reviewed(ReviewResult(step=1, cards=(), assessments=(), edits=()), 0.0, 1.0)

    first = end.commit(0, fail)
    assert first.metrics == {"scaffold/entries": 2.0, "review/failed": 1.0}
    assert end.scaffold.commits == [(0, ReviewResult(step=0, cards=(), assessments=(), edits=()))]
    assert capsys.readouterr().err == (
        "warning: step 0: the scaffold review raised RuntimeError: bug (at x.py:1 in f); the step trains on "
        "with the current scaffold (1 in a row, the run stops at 2)\n"
    )

    second = end.commit(1, good)
    assert second.metrics == {"scaffold/entries": 2.0, "review/failed": 0.0}
    assert end.scaffold.commits[-1] == (1, good.result) and end.failed_in_a_row == 0

    end.commit(2, fail)  # one in a row again, not two: the run goes on
    with pytest.raises(TrainingError) as info:
        end.commit(3, fail)
    assert str(info.value) == (
        "step 3: 2 reviews in a row raised, so the run stopped (its last checkpoint is intact); the last: "
        f"RuntimeError: bug (at x.py:1 in f); the others are the review_failed events in {end.events.path}. "
        "Fix the judge, reviser or card builder named there (or raise scaffold.max_failed_reviews), then "
        "`pats run --resume` the run directory"
    )
    assert len(end.scaffold.commits) == 3, "the failure that stops the run commits nothing"
    end.events.close()
    failed = read_events(tmp_path / "events.jsonl", ReviewFailedEvent)
    assert [(e.step, e.in_a_row, e.error, e.where) for e in failed] == [
        (0, 1, "RuntimeError: bug", "x.py:1 in f"),
        (2, 1, "RuntimeError: bug", "x.py:1 in f"),
        (3, 2, "RuntimeError: bug", "x.py:1 in f"),
    ], "each failure on disk before the run stops"


def test_the_default_limit_is_the_specs(tmp_path):
    assert StepEnd(StandInScaffold(), EventLog(tmp_path / "e.jsonl")).max_failed_reviews == (
        ScaffoldSpec().max_failed_reviews
    )


def test_a_step_end_logs_to_every_sink_and_writes_its_state(tmp_path):
    sinks = [Sink(), Sink()]
    end = step_end(tmp_path, sinks=sinks, states=tmp_path / "states")
    (tmp_path / "states").mkdir()
    committed = Committed(ReviewResult(step=4, cards=(), assessments=(), edits=()), None, {})
    end.log(4, [], committed, {"train/success": 0.5})
    assert all(s.logged == [(4, {"train/success": 0.5})] and s.versions == [] for s in sinks)
    end.scaffold.counted = 7
    end.end(4, {"train/success": 0.5})
    (ended,) = read_events(tmp_path / "events.jsonl", StepEndEvent)
    assert (ended.step, ended.metrics) == (4, {"train/success": 0.5})
    state = ScaffoldState.model_validate_json((tmp_path / "states" / "000004.json").read_text())
    assert state == ScaffoldState(step=4, scaffold_version=0, judge=JudgeState({"counted": 7}))
    no_states = step_end(tmp_path / "other")  # and no sinks: the metrics go nowhere else
    no_states.log(0, [], committed, {"train/success": 0.5})
    no_states.end(0, {})
    assert not (tmp_path / "other" / "states").exists()


def test_restore_cuts_the_scaffold_side_back_to_the_checkpoint(tmp_path):
    spec = ExperimentSpec.model_validate(
        {"name": "cut", "environment": {"kind": "twx"}, "scaffold": {"mode": "pats", "max_failed_reviews": 5}}
    )
    assert STATES.as_posix() == "scaffold/steps", "where verl's resume looks (docs/verl.md)"
    (tmp_path / STATES).mkdir(parents=True)
    for step in range(4):
        (tmp_path / STATES / f"{step:06d}.json").write_text(ScaffoldState(step=step).model_dump_json())
    lines = [{"v": 1, "step": s, "event": "step_end", "metrics": {}} for s in range(4)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(4)))

    judge = JudgeState({"ema": {"twc": 0.25}, "task_ema": {}, "reviews": {"twc": 2}})
    count_tokens = len  # a stand-in for the tokenizer: nothing here is measured in tokens
    end = restore(spec, tmp_path, count_tokens, state=ScaffoldState(step=1, judge=judge), keep_states=True)
    assert sorted(p.name for p in (tmp_path / STATES).iterdir()) == ["000000.json", "000001.json"]
    assert [e.step for e in read_events(tmp_path / "events.jsonl", StepEndEvent)] == [0, 1]
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in rows] == [0, 1]
    assert end.scaffold.judge_state().root["ema"] == {"twc": 0.25}, "the judge of step 1"
    assert end.max_failed_reviews == 5 and end.states == tmp_path / STATES and end.failed_in_a_row == 0

    assert end.state(1).scaffold_version == 0, "the store's version: none yet"

    fresh = restore(spec, tmp_path, count_tokens)  # no checkpoint: back to before step 0
    assert list((tmp_path / STATES).iterdir()) == [] and fresh.states is None
    assert read_events(tmp_path / "events.jsonl", StepEndEvent) == []


def test_restore_opens_the_runs_own_scaffold_store(tmp_path, repo):
    spec = ExperimentSpec.model_validate(
        {
            "name": "seeded",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats", "initial_bank": str(repo / "experiments" / "banks" / "twc.json")},
        }
    )
    end = restore(spec, tmp_path, len, task_types=["twc"])  # a fresh run: the bank is version 1
    assert (tmp_path / "scaffold" / "versions" / "000001.json").exists()
    assert end.state(0).scaffold_version == 1
    # Restarted without a checkpoint (and without a bank): back to version 0, version 1 gone.
    bare = ExperimentSpec.model_validate(
        {"name": "bare", "environment": {"kind": "twx"}, "scaffold": {"mode": "pats"}}
    )
    again = restore(bare, tmp_path, len)
    assert again.state(0).scaffold_version == 0
    assert not (tmp_path / "scaffold" / "versions" / "000001.json").exists()


def test_restore_keeping_states_makes_their_folder_in_a_new_run_directory(tmp_path):
    spec = ExperimentSpec.model_validate(
        {"name": "new", "environment": {"kind": "twx"}, "scaffold": {"mode": "none"}}
    )
    end = restore(spec, tmp_path / "run", len, keep_states=True)  # as verl's scaffold service does
    assert end.states == tmp_path / "run" / "scaffold" / "steps" and end.states.is_dir()
