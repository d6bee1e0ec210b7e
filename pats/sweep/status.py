"""`pats sweep status SWEEP`: one line per cell of a sweep folder (its manifest's cells, in order): its
status, steps done, when it started, how long it ran (or has run), and for a failed cell its error and
its log; a running cell whose every step has ended is in its final evaluation.

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


@dataclass(frozen=True)
class StatusRow:
    cell: str
    status: str  # pending, running, finished, failed, interrupted; started, missing (see the docstring)
    steps: str  # steps done / planned, "-" before the cell's spec was written
    started: str
    seconds: float | None
    note: str


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
        done, planned = _steps(run_dir)
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
            note = f"{record.error.splitlines()[0] if record.error else 'failed'}; log: {run_dir / LOG}"
        elif record.status == "running":
            # every step's end is logged, so what remains is the final evaluation (specs without
            # progress lines print nothing while it plays)
            phase = "; in its final evaluation" if planned and done == planned else ""
            note = f"on {record.host}, pid {record.pid}{phase}"
        rows.append(StatusRow(cell.name, state, steps, stamp(record.started), record.seconds, note))
    return rows


def _steps(run_dir: Path) -> tuple[int, int]:
    """(steps whose end is logged, steps planned); (0, 0) before the run's spec.yaml was written."""
    from pats.logging.events import StepEndEvent, read_events
    from pats.spec import load_spec

    if not (run_dir / "spec.yaml").is_file():
        return 0, 0
    planned = load_spec(run_dir / "spec.yaml").trainer.steps
    events = run_dir / "events.jsonl"
    done = len({e.step for e in read_events(events, StepEndEvent)}) if events.is_file() else 0
    return done, planned


def status_table(folder: Path) -> str:
    rows = status_rows(folder)
    counts = Counter(r.status for r in rows)
    head = f"sweep {folder}: {len(rows)} cells, " + ", ".join(f"{n} {s}" for s, n in counts.items())
    table = [("cell", "status", "steps", "started", "time", "note")] + [
        (r.cell, r.status, r.steps, r.started, _duration(r.seconds), r.note) for r in rows
    ]
    widths = [max(len(t[i]) for t in table) for i in range(5)]
    lines = ["  ".join(t[i].ljust(widths[i]) for i in range(5)) + "  " + t[5] for t in table]
    return "\n".join([head, *(line.rstrip() for line in lines)])


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
