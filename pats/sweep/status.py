"""`pats sweep status SWEEP`: one line per cell of a sweep folder (its manifest's cells, in order): its
status, steps done, when its latest attempt started, how long all its attempts ran (or have run) and
how many there were, and for a failed cell its error (a spec error with its first problem) and its log;
a running cell says when it is evaluating (before training, or its step's review logged, not its end).

The status is the cell's record (CELL/status.json), except: a `running` record whose process on this
machine is gone reads `interrupted`; a cell with no record was run by pats before issue 49 (finished
when its last step ended, else `started`) or has not started (`pending`); a cell the manifest names
whose folder is not there is `missing` (the folder was copied or moved without it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.sweep.cell import stamp
from pats.sweep.checks import finished
from pats.sweep.manifest import MANIFEST, not_started, read_manifest
from pats.sweep.record import LOG, gone, read_status
from pats.sweep.words import counted, headline


@dataclass(frozen=True)
class StatusRow:
    cell: str
    status: str  # pending, running, finished, failed, interrupted; started, missing (see the docstring)
    steps: str  # steps done / planned, "-" before the cell's spec was written
    started: str  # when its latest attempt started
    seconds: float | None  # every attempt together
    note: str
    attempts: int = 0  # attempts started (0: unknown, a record written before issue 59)


def status_rows(folder: Path) -> list[StatusRow]:
    manifest = read_manifest(folder)
    if manifest is None:
        raise PrerequisiteError(
            f"{folder} holds no {MANIFEST}: give a sweep folder (<root>/<name>, e.g. runs/sweeps/NAME)"
        )
    rows = []
    for cell in manifest.cells:
        run_dir = folder / cell.folder
        if not run_dir.is_dir():
            status = "pending" if not_started(folder, cell) else "missing"
            note = "" if status == "pending" else "its folder is not here (copied or moved without it?)"
            rows.append(StatusRow(cell.name, status, "-", "-", None, note))
            continue
        progress = _progress(run_dir)
        done, planned = progress.done, progress.planned
        steps = f"{done}/{planned}" if planned else "-"
        record = read_status(run_dir)
        if record is None:
            state = "pending" if not planned else "finished" if finished(run_dir, planned) else "started"
            note = "" if state == "pending" else "no status record (run by pats before issue 49)"
            rows.append(StatusRow(cell.name, state, steps, "-", None, note))
            continue
        state, note = record.status, ""
        if gone(record):
            state, note = "interrupted", f"its process (pid {record.pid}) is gone"
        elif record.status == "failed":
            note = f"{headline(record.error) or 'failed'}; log: {run_dir / LOG}"
        elif record.status == "running":
            # (specs without progress lines print nothing while an evaluation plays, an hour or more)
            note = f"on {record.host}, pid {record.pid}" + _evaluating(progress)
        rows.append(StatusRow(cell.name, state, steps, stamp(record.started), record.total_seconds, note,
                              record.attempts))  # fmt: skip
    return rows


@dataclass(frozen=True)
class _Progress:
    done: int  # steps whose end is logged
    planned: int  # 0 before the run's spec.yaml was written
    # a step whose review is logged, not its end, and an evaluation follows; -1: the evaluation before
    # training (eval.at_start), nothing of step 0 logged yet and no evaluation either
    evaluating_after: int | None


def _progress(run_dir: Path) -> _Progress:
    from pats.logging.events import EvalEvent, GroupsEvent, StepEndEvent, read_events
    from pats.spec import load_spec

    if not (run_dir / "spec.yaml").is_file():
        return _Progress(0, 0, None)
    spec = load_spec(run_dir / "spec.yaml")
    events = run_dir / "events.jsonl"
    if not events.is_file():
        return _Progress(0, spec.trainer.steps, None)
    ended = {e.step for e in read_events(events, StepEndEvent)}
    reviewed = {e.step for e in read_events(events, GroupsEvent)}
    last = max(reviewed - ended, default=None)
    evaluating = last if last is not None and spec.evaluates_after(last) else None
    if spec.eval.at_start and not ended and not reviewed and not list(read_events(events, EvalEvent)):
        evaluating = -1  # (the run writes its events file once its model and games are loaded)
    return _Progress(len(ended), spec.trainer.steps, evaluating)


def _evaluating(progress: _Progress) -> str:
    step = progress.evaluating_after
    if step is None:
        return ""
    if step == -1:
        return "; in its evaluation before training"
    return (
        "; in its final evaluation" if step + 1 == progress.planned else f"; evaluating after step {step + 1}"
    )


def status_table(folder: Path) -> str:
    rows = status_rows(folder)
    counts = Counter(r.status for r in rows)
    head = f"sweep {folder}: {counted(len(rows), 'cell')}, " + ", ".join(
        f"{n} {s}" for s, n in counts.items()
    )
    table = [("cell", "status", "steps", "started", "time", "note")] + [
        (r.cell, r.status, r.steps, r.started, _time(r), r.note) for r in rows
    ]
    widths = [max(len(t[i]) for t in table) for i in range(5)]
    lines = ["  ".join(t[i].ljust(widths[i]) for i in range(5)) + "  " + t[5] for t in table]
    return "\n".join([head, *(line.rstrip() for line in lines)])


def _time(row: StatusRow) -> str:
    """Every attempt's time together, and how many there were when more than one."""
    return _duration(row.seconds) + (f" ({row.attempts} attempts)" if row.attempts > 1 else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
