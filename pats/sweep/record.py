"""What a sweep keeps in each cell's folder beside the run: `status.json` (where the cell stands),
`log.txt` (everything the cell printed, every attempt appended) and `traceback.txt` (its last failure's).

The status is written by the process that runs the cell (`running` when it starts, `finished` or
`failed` when it ends, `interrupted` when the user stopped it) and by `pats sweep` itself: `pending`
for every cell it is about to run, before any runs, and `failed` for a cell whose Ray worker died
(timed from the worker's own start). A cell whose record says `running` while the process named in it
is gone (the sweep was killed) is shown as interrupted by `pats sweep status`. Each record carries the
cell's attempts so far and how long the earlier ones ran, so its status shows the cell's whole time.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from pats.fileio import write_atomic
from pats.types import Record

STATUS, LOG, TRACEBACK = "status.json", "log.txt", "traceback.txt"
SWEEP_FILES = (STATUS, LOG, TRACEBACK)  # a cell that starts over keeps these

State = Literal["pending", "running", "finished", "failed", "interrupted"]


class CellStatus(Record):
    """CELL/status.json."""

    status: State
    started: float | None = None  # Unix time this attempt started (None: not yet)
    ended: float | None = None
    how: Literal["", "ran", "resumed"] = ""  # a finished attempt: started afresh or from a checkpoint
    error: str = ""  # a failed attempt's error (its first 2000 characters)
    traceback: str = ""  # the file, in the cell's folder, that holds the failure's traceback
    host: str = ""  # where the attempt runs (a Ray node's name, say)
    pid: int = 0
    attempts: int = 0  # attempts started so far, this one included (0: records before issue 59)
    earlier_s: float = 0.0  # how long the attempts before this one ran, together

    @property
    def seconds(self) -> float | None:
        """How long the attempt ran, or has run so far."""
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else time.time()) - self.started

    @property
    def total_seconds(self) -> float | None:
        """How long every attempt ran, together (None before the first)."""
        if self.seconds is None:
            return self.earlier_s or None
        return self.earlier_s + self.seconds

    def carried(self) -> dict[str, Any]:
        """What the cell's next record keeps of this one: its attempts so far and their time (an
        attempt whose end was not recorded, its process killed, counts without its time)."""
        ran = self.ended - self.started if self.started is not None and self.ended is not None else 0.0
        return {"attempts": self.attempts, "earlier_s": self.earlier_s + ran}


def read_status(run_dir: Path) -> CellStatus | None:
    """The cell's record; None when it has none (not planned by a sweep since issue 49) or an unreadable one."""
    path = run_dir / STATUS
    if not path.is_file():
        return None
    try:
        return CellStatus.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError:
        return None


def write_status(run_dir: Path, status: CellStatus) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / STATUS, status.model_dump_json(indent=1))


def running_here(before: CellStatus | None = None) -> CellStatus:
    """The record of an attempt starting now in this process, after the cell's record `before`."""
    before = before or CellStatus(status="pending")
    return CellStatus(
        status="running",
        started=time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
        **(before.carried() | {"attempts": before.attempts + 1}),
    )


def pending_after(before: CellStatus | None) -> CellStatus:
    """The record of a cell a sweep is about to run, after its record `before` (its attempts kept)."""
    return CellStatus(status="pending", **(before.carried() if before else {}))


def gone(status: CellStatus) -> bool:
    """A `running` record whose process, on this machine, no longer exists."""
    if status.status != "running" or status.host != socket.gethostname() or status.pid <= 0:
        return False
    try:
        os.kill(status.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
