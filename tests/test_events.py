"""The event log read back as typed records: what the real writers write comes back as the records they
were made of, and a line this pats cannot read says which file and line, and what to do."""

from __future__ import annotations

import asyncio
import json

import pytest

from pats.errors import PatsError
from pats.logging.events import (
    EVENTS,
    CardEvent,
    EventLog,
    StepEndEvent,
    VersionEvent,
    read_events,
    write_review,
)
from pats.spec.models import ExperimentSpec
from pats.step_end import Reviewed, StepEnd
from pats.testing.engine import fake_engine
from pats.testing.fakes import ScriptedBackend, improving_schedule
from pats.types import ReviewResult


class RecordingLog(EventLog):
    """The real writer, keeping the record each line was written from (its payload as given)."""

    def __init__(self, path):
        super().__init__(path)
        self.written = []

    def write(self, step, event, **payload):
        self.written.append(EVENTS[event].model_validate({"step": step, **payload}))
        super().write(step, event, **payload)


def test_what_the_writers_write_reads_back_as_the_same_records(tmp_path, count_tokens):
    spec = ExperimentSpec.model_validate(
        {
            "name": "events-test",
            "environment": {"kind": "twx", "num_eval_tasks": 2},
            "scaffold": {"mode": "pats"},
            "trainer": {"steps": 4, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 2, "at_start": True},
        }
    )
    engine = fake_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=1), count_tokens)
    engine.events.close()
    log = engine.events = RecordingLog(tmp_path / "events.jsonl")
    asyncio.run(engine.run())
    # What a rules-only engine never writes: a refused set, the fallback, a review that raised.
    refused = ReviewResult(step=4, cards=(), assessments=(), edits=(), refused=("a bad set",), fallback=True)
    write_review(log, 4, [], refused, None)
    failed = Reviewed(None, 0.0, 0.0, "RuntimeError: judge bug", "fakes.py:1 in assess")
    StepEnd(engine.scaffold, log).commit(4, failed)
    log.end_step(4, metrics={"review/failed": 1.0})
    log.close()

    events = read_events(tmp_path / "events.jsonl")
    assert {e.event for e in events} == set(EVENTS), "every kind of event, from the real writers"
    assert events == log.written
    assert read_events(tmp_path / "events.jsonl", CardEvent) == [
        e for e in events if isinstance(e, CardEvent)
    ]
    assert [e.step for e in read_events(tmp_path / "events.jsonl", StepEndEvent)] == [0, 1, 2, 3, 4]


def write_lines(path, *lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


END = {"v": 1, "step": 0, "event": "step_end", "metrics": {"train/success": 0.5}}


def test_an_unknown_event_names_its_line_and_what_to_do(tmp_path):
    path = tmp_path / "events.jsonl"
    write_lines(path, END, {"v": 1, "step": 1, "event": "mystery", "x": 1})
    with pytest.raises(PatsError) as err:
        read_events(path, StepEndEvent)
    message = str(err.value)
    assert message.startswith(f"{path}:2: unknown event 'mystery' (known: groups, card,")
    assert "read the run with the pats version that wrote it, or run the experiment again" in message


def test_a_missing_field_names_it_and_only_the_lines_asked_for_must_parse(tmp_path):
    path = tmp_path / "events.jsonl"
    write_lines(path, END, {"v": 1, "step": 0, "event": "version", "number": 1, "entries": 2})
    with pytest.raises(
        PatsError, match=rf"{path}:2: a 'version' event this pats cannot read \(no field 'hash'\)"
    ):
        read_events(path, VersionEvent)
    with pytest.raises(PatsError, match="no field 'hash'"):
        read_events(path)
    # An old run's report needs its step ends only: lines of other kinds do not stop it.
    assert read_events(path, StepEndEvent) == [StepEndEvent(step=0, metrics={"train/success": 0.5})]


def test_another_schema_version_a_field_it_does_not_know_and_a_broken_line_are_refused(tmp_path):
    path = tmp_path / "events.jsonl"
    write_lines(path, {**END, "v": 2})
    with pytest.raises(PatsError, match=rf"{path}:1: event log version 2, this pats reads version 1"):
        read_events(path, StepEndEvent)
    write_lines(path, {**END, "wall": 3.0})
    with pytest.raises(PatsError, match="a field 'wall' it does not know"):
        read_events(path, StepEndEvent)
    write_lines(path, '{"v": 1, "step": 0, "ev', END)
    with pytest.raises(PatsError, match=rf"{path}:1: not a JSON line"):
        read_events(path, StepEndEvent)


def test_a_last_line_still_being_written_is_left_out(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(END) + "\n" + '{"v": 1, "step": 1, "event": "gro')
    assert [e.step for e in read_events(path)] == [0]


def test_the_kind_is_a_record_class(tmp_path):
    path = tmp_path / "events.jsonl"
    write_lines(path, END)
    with pytest.raises(TypeError, match="takes an event record class .*StepEndEvent.*not 'step_end'"):
        read_events(path, "step_end")
