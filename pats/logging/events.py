"""The run's event log: one JSON object per line, versioned, flushed at every step boundary.

Each line is `{"v": 1, "step": int, "event": str, ...payload}`. A step is complete once its
`step_end` line is on disk; `EventLog.open` drops lines of a step that never ended, so a resumed run
redoes that step without duplicating or losing one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

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


def read_events(path: Path, event: str | None = None) -> list[dict]:
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [x for x in lines if event is None or x["event"] == event]


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
