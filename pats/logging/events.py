"""The run's event log: one JSON object per line, versioned, flushed at every step boundary.

Each line is `{"v": 1, "step": int, "event": str, ...payload}`. A step is complete once its
`step_end` line is on disk; `EventLog.open` drops lines of a step that never ended, so a resumed run
redoes that step without duplicating or losing one.

Read back, each line is one typed record of its event (`StepEndEvent`, `EditEvent`, ...; `EVENTS`
maps event names to them): `read_events(path, StepEndEvent)` is the run's step ends, in order. The
records mirror what the writers below and `StepEnd`/`Engine.evaluate` write; the lines themselves are
unchanged, so older run folders of this schema version read as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, overload

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

from pats.errors import PatsError
from pats.types import Assessment, Edit, EvidenceCard, Record

SCHEMA_VERSION = 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class EventLog:
    def __init__(self, path: Path, keep_through: int | None = None):
        """`keep_through`: resuming from the checkpoint of that step, later steps are dropped too."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.last_complete_step = _truncate_to_complete(path, keep_through)
        self._file = path.open("a", encoding="utf-8")

    def write(self, step: int, event: str, **payload: Any) -> None:
        line = {"v": SCHEMA_VERSION, "step": step, "event": event, **_jsonable(payload)}
        self._file.write(json.dumps(line, ensure_ascii=False) + "\n")

    def end_step(self, step: int, **payload: Any) -> None:
        self.write(step, "step_end", **payload)
        self.flush()
        self.last_complete_step = step

    def flush(self) -> None:
        """What was written so far, on disk (a step's end; the cause of a failure before a stop)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def write_review(events: EventLog, step: int, groups, result, version) -> None:
    """One step's rollout groups, its review (cards, assessments, edits, refused sets; `result` None
    when the review failed) and the new scaffold version, if any: the same lines for every backend."""
    events.write(
        step,
        "groups",
        groups=[
            {"task": g.task.id, "type": g.task.type, "version": g.scaffold_version, "rewards": g.rewards}
            for g in groups
        ],
    )
    if result is not None:
        for name in ("card", "assessment", "edit"):
            for item in getattr(result, f"{name}s"):
                events.write(step, name, **{name: item})
        for problem in result.refused:
            events.write(step, "refused", problem=problem)
        if result.fallback:
            events.write(step, "fallback", reason="reviser failed validation or raised; rules answered")
    if version is not None:
        events.write(step, "version", number=version.number, hash=version.hash, entries=len(version.entries))


# -- reading the log back: one typed record per event ----------------------------------------------


class EventRecord(Record):
    """What every event line carries besides its schema version `v` (checked as it is read)."""

    step: int  # -1 for the evaluation before the first step


class GroupRewards(Record):
    """One rollout group as the `groups` event keeps it."""

    task: str  # task id
    type: str  # task type
    version: str  # hash of the scaffold version pinned for the group ("" for the empty view)
    rewards: tuple[float, ...]


class GroupsEvent(EventRecord):
    event: Literal["groups"] = "groups"
    groups: tuple[GroupRewards, ...]


class CardEvent(EventRecord):
    event: Literal["card"] = "card"
    card: EvidenceCard


class AssessmentEvent(EventRecord):
    event: Literal["assessment"] = "assessment"
    assessment: Assessment


class EditEvent(EventRecord):
    """One edit of the step's accepted set (an applied one: a set the store refused is not logged)."""

    event: Literal["edit"] = "edit"
    edit: Edit


class RefusedEvent(EventRecord):
    event: Literal["refused"] = "refused"
    problem: str  # why an edit set was refused, by the review's validation or by the store


class FallbackEvent(EventRecord):
    event: Literal["fallback"] = "fallback"
    reason: str


class VersionEvent(EventRecord):
    event: Literal["version"] = "version"
    number: int
    hash: str
    entries: int  # how many entries the new version holds


class ReviewFailedEvent(EventRecord):
    """A review that raised (pats.step_end's failure policy): its cause, and how many in a row."""

    event: Literal["review_failed"] = "review_failed"
    error: str  # "TypeError: ..."
    where: str  # "file:line in function"
    in_a_row: int


class StepEndEvent(EventRecord):
    event: Literal["step_end"] = "step_end"
    metrics: dict[str, float] = Field(default_factory=dict)  # EventLog.end_step(step) writes none


class EvalEvent(EventRecord):
    event: Literal["eval"] = "eval"
    metrics: dict[str, float]
    # Held-out task id -> its episodes' successes (1.0 won, 0.0 not), without the scaffold and with it:
    # what `pats compare` resamples by game. Empty in logs written before pats kept them.
    outcomes: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    outcomes_with_scaffold: dict[str, tuple[float, ...]] = Field(default_factory=dict)


Event = (
    GroupsEvent
    | CardEvent
    | AssessmentEvent
    | EditEvent
    | RefusedEvent
    | FallbackEvent
    | VersionEvent
    | ReviewFailedEvent
    | StepEndEvent
    | EvalEvent
)
EVENTS: dict[str, type[EventRecord]] = {kind.model_fields["event"].default: kind for kind in get_args(Event)}
E = TypeVar("E", bound=EventRecord)

OTHER_VERSION = (
    "the line was written by another version of pats (or edited): read the run with the pats version "
    "that wrote it, or run the experiment again with this one"
)


@overload
def read_events(path: Path) -> list[Event]: ...
@overload
def read_events(path: Path, kind: type[E]) -> list[E]: ...
def read_events(path: Path, kind: type[EventRecord] | None = None) -> list[Any]:
    """The log's events in order, each as the record of its event (`EVENTS`); with `kind` (a record
    class, e.g. `StepEndEvent`) only those, and only they are checked in full, so an old run's other
    lines do not stop its report. A last line without its newline is still being written (the run goes
    on) and is left out; any other line that is not an event of this schema version raises a PatsError
    naming the file and line."""
    if kind is not None and kind not in EVENTS.values():
        known = ", ".join(k.__name__ for k in EVENTS.values())
        raise TypeError(f"read_events takes an event record class ({known}), not {kind!r}")
    events = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").split("\n")[:-1], start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        name, line = _envelope(where, raw)
        if kind is None or EVENTS[name] is kind:
            events.append(_record(where, EVENTS[name], line))
    return events


def _envelope(where: str, raw: str) -> tuple[str, dict[str, Any]]:
    """The event name of one line and its fields, `v` checked and taken off."""
    try:
        line = json.loads(raw)
    except json.JSONDecodeError as err:
        raise PatsError(
            f"{where}: not a JSON line ({err}); the file was cut or edited there: fix or delete that line"
        ) from None
    if not isinstance(line, dict):
        raise PatsError(f"{where}: a JSON {type(line).__name__}, not an event object; {OTHER_VERSION}")
    version = line.pop("v", None)
    if version != SCHEMA_VERSION:
        raise PatsError(
            f"{where}: event log version {version!r}, this pats reads version {SCHEMA_VERSION}; {OTHER_VERSION}"
        )
    name = line.get("event")  # the one field every line has, read before its record is known
    if name not in EVENTS:
        raise PatsError(f"{where}: unknown event {name!r} (known: {', '.join(EVENTS)}); {OTHER_VERSION}")
    return name, line


def _record(where: str, kind: type[E], line: dict[str, Any]) -> E:
    try:
        return kind.model_validate(line)
    except ValidationError as err:
        problems = [_problem(e) for e in err.errors()]
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise PatsError(
            f"{where}: a {line['event']!r} event this pats cannot read ({'; '.join(problems[:3])}{more}); "
            f"{OTHER_VERSION}"
        ) from None


def _problem(error: ErrorDetails) -> str:
    field = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"no field {field!r}"
    if error["type"] == "extra_forbidden":
        return f"a field {field!r} it does not know"
    return f"{field}: {error['msg']}"


def _truncate_to_complete(path: Path, keep_through: int | None = None) -> int:
    """Cut the log after the last `step_end` (a half-written step, or a torn last line) at or before
    step `keep_through`; return that step, or -1 if no step is kept."""
    if not path.exists():
        return -1
    data = path.read_bytes()
    keep, last, offset = 0, -1, 0
    for raw in data.splitlines(keepends=True):
        offset += len(raw)
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            break
        if line.get("event") == "step_end":
            if keep_through is not None and line["step"] > keep_through:
                break
            keep, last = offset, line["step"]
    if keep != len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
    return last
