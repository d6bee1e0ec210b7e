"""A sweep stopped at the user's request (SIGINT, SIGTERM): what it says, and, where its cells run as
Ray tasks, the stop passed on from the sweep's own process to each running cell.

Without Ray a cell runs in the sweep's process, so the signal reaches its run directly: the run stops
after the step in flight, checkpointed (a second signal stops it at once), and the sweep stops with it.
Under Ray the cells run in Ray's worker processes, and Ray's own handler in the sweep's process would
stop Ray, killing them mid-step. So while cells run, the sweep's process keeps the signals itself
(`DriverSignals`) and `pass_on` sends SIGTERM to each running cell's process (its status.json names
it): each stops as a cell run here would; cells not yet started stay pending. SIGTERM whichever signal
came, since Ray starts its processes with SIGINT blocked. A cell on another node (a cluster) is asked
through Ray (`ray.cancel`: a KeyboardInterrupt in its task), which this repository's tests do not
cover. A second signal is passed on the same way (the runs stop at once, their steps in flight lost),
and the sweep then waits at most AT_ONCE_S for the cells to record it before it stops Ray; a cell still
running then is recorded `interrupted` by the sweep.

Either way the sweep prints a line per stopped cell and exits as a stopped run does (128 + the
signal: 143 for SIGTERM, 130 for SIGINT), saying to rerun it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from pats.errors import RunInterrupted
from pats.sweep.grid import Cell
from pats.sweep.record import LOG, read_status
from pats.sweep.words import counted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
AT_ONCE_S = 10.0  # after a second signal: how long the sweep waits for its cells to record their stop


class DriverSignals:
    """Within the block, SIGINT and SIGTERM to this process are counted here instead of stopping it
    (on the main thread; elsewhere Python cannot take them); the handlers before are restored after."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.passed = 0  # how many of them were passed on to the cells
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> DriverSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._saved[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            # None: a handler not installed from Python (Ray's C++ one): the default in its place
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    def unpassed(self) -> int | None:
        """The latest signal not yet passed on (and marks it passed), else None."""
        if len(self.received) == self.passed:
            return None
        self.passed = len(self.received)
        return self.received[-1]


def pass_on(
    ray: Any, pending: Mapping[Any, tuple[int, Cell]], signum: int, first: bool, say: Callable[[str], None]
) -> None:
    """The stop, passed to every running cell among `pending` (Ray task -> (index, cell)); after the
    first signal the cells not started are cancelled (they stay pending: a rerun starts them)."""
    name = signal.Signals(signum).name
    say(
        f"{name}: stopping each running cell after its step in flight (it is checkpointed); cells not "
        "started stay pending; send it again to stop them at once"
        if first
        else f"{name} again: stopping the running cells at once (their steps in flight are lost)"
    )
    here = socket.gethostname()
    for ref, (_, cell) in pending.items():
        record = read_status(cell.run_dir)
        if record is None or record.status == "pending":
            if first:
                ray.cancel(ref)
        elif record.status == "running" and record.host == here and record.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
        elif record.status == "running":
            ray.cancel(ref)


def interrupted_line(i: int, total: int, cell: Cell, err: RunInterrupted) -> str:
    """The line `pats sweep` prints for a cell a signal stopped: the run's own first sentence
    ("stopped at your request after step 2 (checkpointed)"; the rest names `pats run --resume`, while
    the sweep's own message says to rerun the sweep)."""
    first = str(err).partition(". ")[0]
    return f"cell {i}/{total} {cell.name}: interrupted: {first} (log: {cell.run_dir / LOG})"


def sweep_stopped(folder: Path, stopped: Sequence[str], signum: int) -> RunInterrupted:
    """The error a sweep stops with: which cells the signal stopped, and to rerun the sweep."""
    which = (
        f"{counted(len(stopped), 'cell')} stopped ({', '.join(stopped)})"
        if stopped
        else "no running cell was stopped"
    )
    return RunInterrupted(
        f"the sweep stopped at your request: {which}. Rerun the same `pats sweep` command to go on: finished "
        f"cells are skipped, stopped ones resume from their last checkpoint, the others start "
        f"(`pats sweep status {folder}` shows each cell)",
        signum,
    )
