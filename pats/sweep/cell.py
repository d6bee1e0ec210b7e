"""One cell of a sweep, run to its end: skipped if finished, resumed if it checkpointed, else started,
through `pats run`'s own entry points (`run_spec`, `resume`: the same checks, then `train`).

While it runs, its output goes to CELL/log.txt as well as the terminal (pats/sweep/logs.py) and its
CELL/status.json says `running`; then `finished`, or `failed` with the error and CELL/traceback.txt
(the traceback is in the log too), or `interrupted` when the user stopped it (the sweep stops too).
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pats.errors import PatsError, RunInterrupted
from pats.fileio import write_atomic
from pats.sweep.checks import check_cell
from pats.sweep.grid import Cell
from pats.sweep.logs import tee_output
from pats.sweep.record import (
    LOG,
    SWEEP_FILES,
    TRACEBACK,
    CellStatus,
    read_status,
    running_here,
    write_status,
)
from pats.sweep.words import headline

Outcome = Literal["ran", "resumed", "skipped", "refused", "failed"]  # pragma: no mutate


@dataclass(frozen=True)
class CellResult:
    name: str
    status: Outcome
    seconds: float
    error: str = ""  # why a failed or refused cell did not run to its end (its first 2000 characters)


def run_cell(cell: Cell, trainers: Mapping | None = None, prefix: str = "") -> CellResult:
    """Train one cell to its end (see the module's docstring); `prefix` goes before each line of its
    output on the terminal (not in its log)."""
    from pats.engine.run import TRAINERS

    check, why = check_cell(cell)
    if check == "finished":
        return CellResult(cell.name, "skipped", 0.0)
    if check == "refused":  # the folder is another run's: nothing of it is touched
        return CellResult(cell.name, "refused", 0.0, why)
    return _attempt(cell, check == "resume", trainers or TRAINERS, prefix)


def _attempt(cell: Cell, resuming: bool, trainers: Mapping, prefix: str) -> CellResult:
    from pats.engine.run import resume, run_spec
    from pats.spec import spec_to_yaml

    run_dir = cell.run_dir
    if not resuming:
        _clear(run_dir)  # died before its first checkpoint (or never started): start over
    record = running_here(read_status(run_dir))
    write_status(run_dir, record)
    how: Outcome = "resumed" if resuming else "ran"
    header = (f"--- pats sweep: {'resuming' if resuming else 'starting'} {cell.name} at "
              f"{stamp(record.started)} on {record.host} (pid {record.pid})\n")  # fmt: skip
    with tee_output(run_dir / LOG, prefix, header):
        try:
            if resuming:
                # check_cell found its spec.yaml a run of this cell's spec but for where it runs: write
                # where it runs now (paths that moved with the folder, this machine's threads), which
                # resume reads; the old paths may be gone (a clone elsewhere)
                write_atomic(run_dir / "spec.yaml", spec_to_yaml(cell.spec))
                resume(run_dir, trainers)
            else:
                run_spec(cell.spec, trainers)
        except (RunInterrupted, KeyboardInterrupt):
            write_status(run_dir, record.model_copy(update={"status": "interrupted", "ended": time.time()}))
            raise  # the user stopped it: the sweep stops too
        except Exception as err:  # a failed cell is recorded and reported; the others go on
            return _failed(cell, record, err)
        finally:
            gc.collect()  # the next cell loads its own model
    ended = time.time()
    (run_dir / TRACEBACK).unlink(missing_ok=True)
    write_status(run_dir, record.model_copy(update={"status": "finished", "ended": ended, "how": how}))
    return CellResult(cell.name, how, ended - (record.started or ended))


def _failed(cell: Cell, record: CellStatus, err: Exception) -> CellResult:
    """Inside the log's copy: the traceback to traceback.txt and the log (a pats error, which says
    what to do, as its message alone: its traceback is in the file), the record failed."""
    text = traceback.format_exc()
    write_atomic(cell.run_dir / TRACEBACK, text)
    print(f"error: {err}" if isinstance(err, PatsError) else text.rstrip(), file=sys.stderr, flush=True)
    error = ("" if isinstance(err, PatsError) else f"{type(err).__name__}: ") + str(err)
    ended = time.time()
    write_status(cell.run_dir, record.model_copy(
        update={"status": "failed", "ended": ended, "error": error[:2000], "traceback": TRACEBACK}
    ))  # fmt: skip
    return CellResult(cell.name, "failed", ended - (record.started or ended), error[:2000])


def _clear(run_dir: Path) -> None:
    """Everything in the cell's folder but the sweep's own files (its status, log and traceback)."""
    if not run_dir.is_dir():
        return
    for path in run_dir.iterdir():
        if path.name in SWEEP_FILES:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def stamp(when: float | None) -> str:
    return datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S") if when is not None else "-"


def line(i: int, total: int, cell: Cell, result: CellResult) -> str:
    """The line `pats sweep` prints when a cell ends."""
    first = headline(result.error)
    what = {
        "ran": f"ran in {result.seconds:.0f} s",
        "resumed": f"resumed and finished in {result.seconds:.0f} s",
        "skipped": "already finished, skipped",
        "refused": f"REFUSED: {first}",
        "failed": f"FAILED after {result.seconds:.0f} s: {first} (log: {cell.run_dir / LOG})",
    }[result.status]
    return f"cell {i}/{total} {cell.name}: {what}" + (
        "" if result.status == "failed" else f" ({cell.run_dir})"
    )


def starting(cell: Cell) -> str:
    """What `pats sweep` says as a cell starts here: starting, or resuming from the step after its
    last checkpoint."""
    from pats.engine.run import latest_checkpoint

    state = latest_checkpoint(cell.run_dir) if check_cell(cell)[0] == "resume" else None
    return "starting" if state is None else f"resuming from step {state.step + 1}"


def ray_task(cell: Cell, trainers: Mapping | None, cwd: str) -> CellResult:
    """A cell as a Ray task: the driver's working directory where this node has it, then the cell.
    The sweep passes a stop on as SIGTERM (pats/sweep/stop.py): the run's own handler takes it while
    it trains; before (its model loading) or after, Ray's would end the worker, so here it is a
    KeyboardInterrupt, which the cell records as `interrupted` and the sweep reads as a stop."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    main = threading.current_thread() is threading.main_thread()  # (Ray runs tasks there)
    before = signal.getsignal(signal.SIGTERM)
    if main:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run_cell(cell, trainers)
    except KeyboardInterrupt:
        raise RunInterrupted(
            "stopped at your request outside its training steps; its last checkpoint is kept", signal.SIGTERM
        ) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)
