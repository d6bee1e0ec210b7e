"""Cells as Ray tasks: on a Ray cluster that is already running (`--ray ADDRESS`), or on a Ray instance
this command starts on this machine, sized to it, and stops at its end (`--ray local`; `--parallel N`).

Each cell is one Ray task asking for CPUs, GPUs and memory (the sweep's `cpus`, `gpus`, `memory`; with
`--parallel N`, a 1/N share of each of the machine's), so Ray decides how many run at once and where:
pats schedules nothing itself. A cell's spec that leaves `trainer.threads` unset gets the CPUs it asks
for (at least 1), so N cells do not each start a thread per core. Ray's log de-duplication is off
(RAY_DEDUP_LOGS=0: it merged the progress lines of different cells) and each line a cell prints comes
to this terminal prefixed by Ray with the cell's name, `(quickstart-s0 pid=...)`. On a local Ray the
cells run at the sweep's own niceness (Ray's default would add 15: RAY_worker_niceness=0 unless set). A
worker that dies (out of memory, a crash) fails its cell only, timed from the cell's own start. A
SIGINT or SIGTERM to the sweep is passed on to its running cells (pats/sweep/stop.py).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pats.errors import PrerequisiteError, RunInterrupted, install_hint
from pats.host import machine_cpus
from pats.sweep.cell import CellResult, line, ray_task
from pats.sweep.grid import Cell, SweepSpec
from pats.sweep.record import LOG, CellStatus, read_status, write_status
from pats.sweep.stop import AT_ONCE_S, DriverSignals, interrupted_line, pass_on, sweep_stopped
from pats.sweep.words import counted

GIB = 1024**3
OBJECT_STORE = 256 * 1024**2  # a local Ray's object store: cells pass specs and results, nothing large
POLL_S = 0.5  # how often the sweep looks for a signal while it waits for its cells


@dataclass(frozen=True)
class Asks:
    """What each cell's Ray task asks for; `parallel`: a 1/N share of the machine, decided when Ray is up."""

    cpus: float
    gpus: float
    memory_gb: float
    parallel: int | None = None

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus))

    def text(self) -> str:
        memory = f", {self.memory_gb:.1f} GiB" if self.memory_gb else ""
        return f"{self.cpus:g} CPU, {self.gpus:g} GPU{memory} each"


def asks_for(sweep: SweepSpec, parallel: int | None) -> Asks:
    """The sweep's own asks, or with `parallel` 1/N of this machine's CPUs (GPUs and memory once Ray
    has measured them)."""
    if parallel:
        return Asks(machine_cpus() / parallel, 0.0, 0.0, parallel)
    return Asks(sweep.cpus, sweep.gpus, sweep.memory)


def import_ray() -> Any:
    """Ray, with its log de-duplication off (read when Ray is imported); a PrerequisiteError naming the
    extra when it is not installed."""
    os.environ["RAY_DEDUP_LOGS"] = "0"
    try:
        import ray
        import ray._private.ray_logging as ray_logging
    except ImportError:
        raise PrerequisiteError(f"running cells as Ray tasks needs Ray: {install_hint('sweep')}") from None
    ray_logging.RAY_DEDUP_LOGS = False  # Ray was imported before (by verl, say): the variable came late
    return ray


def run_ray(
    cells: Sequence[tuple[int, Cell]],
    total: int,
    address: str,
    asks: Asks,
    say: Callable[[str], None],
    trainers: Mapping | None = None,
) -> dict[int, CellResult]:
    """Each (index, cell) a Ray task; a line per cell as it ends, in the order they end. `address`
    "local" starts Ray here, stopped at the end, unless this process runs one already (then that one)."""
    ray = import_ray()
    started_here = False
    if not ray.is_initialized():
        if address == "local":
            # Ray starts its workers 15 niceness above its own (capped at 19): a sweep run with `nice -n 10`
            # had its cells at 19, level with anything else niced. The cells take the sweep's niceness.
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(address="local", num_cpus=machine_cpus(), include_dashboard=False,
                     object_store_memory=OBJECT_STORE)  # fmt: skip
            started_here = True
        else:
            ray.init(address=address)
    try:
        if asks.parallel:
            asks = _share(ray.cluster_resources(), asks)
        memory = {"memory": int(asks.memory_gb * GIB)} if asks.memory_gb else {}
        task = ray.remote(num_cpus=asks.cpus, num_gpus=asks.gpus, max_retries=0, **memory)(ray_task)
        where = " on a local Ray instance" if started_here else ""
        say(f"submitted {counted(len(cells), 'cell')} as Ray tasks{where} ({asks.text()})")
        submitted = time.time()
        pending = {
            task.options(name=cell.name).remote(cell, trainers, os.getcwd()): (i, cell) for i, cell in cells
        }
        results: dict[int, CellResult] = {}
        with DriverSignals() as signals:
            stopped, signum = _collect(ray, pending, total, submitted, signals, say, results)
        if signals.received:  # the user stopped the sweep itself
            signum = signals.received[0]
            stopped += _stop_running(pending)  # not back by the deadline after a second signal
        if signum is not None:  # as a cell stopped here would: the sweep stops, and a rerun resumes
            raise sweep_stopped(cells[0][1].run_dir.parent, stopped, signum)
        return results
    finally:
        if started_here:
            ray.shutdown()


def _collect(
    ray: Any,
    pending: dict[Any, tuple[int, Cell]],
    total: int,
    submitted: float,
    signals: DriverSignals,
    say: Callable[[str], None],
    results: dict[int, CellResult],
) -> tuple[list[str], int | None]:
    """Each cell's result into `results` as it ends, a line each, until none is pending, or until
    AT_ONCE_S after a second signal. Returns the cells a signal stopped, and the signal of the first."""
    stopped: list[str] = []
    signum: int | None = None  # pragma: no mutate (the annotation is never evaluated)
    deadline: float | None = None  # pragma: no mutate (likewise)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        unpassed = signals.unpassed()
        if unpassed is not None:  # SIGINT/SIGTERM to the sweep itself: to its running cells
            first = len(signals.received) == 1
            pass_on(ray, pending, unpassed, first, say)
            if not first and deadline is None:
                deadline = time.monotonic() + AT_ONCE_S
        if deadline is not None and time.monotonic() > deadline:
            break
        if not done:
            continue
        i, cell = pending.pop(done[0])
        try:
            result = ray.get(done[0])
        except RunInterrupted as err:  # a signal stopped the cell; it recorded itself interrupted
            err = _cause(err)
            signum = err.signum if signum is None else signum
            stopped.append(cell.name)
            say(interrupted_line(i, total, cell, err))
            _cancel_queued(ray, pending)
            continue
        except ray.exceptions.TaskCancelledError:  # cancelled after a cell or the sweep was interrupted
            if _cancelled(cell):
                stopped.append(cell.name)
            continue
        except Exception as err:  # the worker died (out of memory, a crash): the others go on
            if signals.received:  # ended by the stop passed on to it (a second one, outside its steps)
                _interrupted(
                    cell, f"its Ray worker ended after the sweep passed the stop on: {type(err).__name__}"
                )
                stopped.append(cell.name)
                continue
            result = worker_died(cell, submitted, f"its Ray worker died: {type(err).__name__}: {err}")
        results[i] = result
        say(line(i, total, cell, result))
    return stopped, signum


def _stop_running(pending: Mapping[Any, tuple[int, Cell]]) -> list[str]:
    """Cells still running when the sweep stops Ray (after a second signal): recorded interrupted."""
    why = "stopped with Ray after a second signal, before the cell recorded its stop"
    return [cell.name for _, cell in pending.values() if _interrupted(cell, why)]


def _interrupted(cell: Cell, why: str) -> bool:
    """A cell whose record says `running` while its process is being stopped: recorded `interrupted`,
    with `why` in its log (so none says a cell runs that does not). True for such a cell."""
    record = read_status(cell.run_dir)
    if record is None or record.status != "running":
        return False
    write_status(cell.run_dir, record.model_copy(update={"status": "interrupted", "ended": time.time()}))
    _log(cell, why)
    return True


def _cause(err: RunInterrupted) -> RunInterrupted:
    """The cell's own RunInterrupted (Ray raises a copy that is also a RayTaskError)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, RunInterrupted) else err


def _cancel_queued(ray: Any, pending: Mapping[Any, tuple[int, Cell]]) -> None:
    """After one cell was stopped by a signal, the cells not yet started stay pending (a rerun starts
    them); the running ones go on to their end."""
    for ref, (_, cell) in pending.items():
        record = read_status(cell.run_dir)
        if record is not None and record.status == "pending":
            ray.cancel(ref)


def _cancelled(cell: Cell) -> bool:
    """A queued cell that Ray cancelled: one still `pending` stays so (a rerun starts it). Ray may cancel
    it just as its worker starts it, once its record says `running` and before the cell records its end
    (the sweep then stops Ray, and its worker with it): that record is made `interrupted` here, so none
    says a cell runs that does not. True for such a cell."""
    return _interrupted(cell, "cancelled as it started, after the sweep or another cell was interrupted")


def _share(resources: Mapping[str, float], asks: Asks) -> Asks:
    """1/N of the cluster's CPUs, GPUs (whole ones where there are N or more) and memory."""
    n = asks.parallel or 1
    gpus = resources.get("GPU", 0.0) / n
    return Asks(
        cpus=asks.cpus,
        gpus=math.floor(gpus) if gpus >= 1 else gpus,
        memory_gb=math.floor(resources.get("memory", 0.0) / n / GIB * 10) / 10,
        parallel=n,
    )


def worker_died(cell: Cell, submitted: float, error: str) -> CellResult:
    """A cell whose worker died, recorded as failed and timed from its own start (its `running`
    record), else from its submission; its log gets the reason."""
    now = time.time()
    record = read_status(cell.run_dir)
    started = record.started if record and record.status == "running" else None
    if started is None:
        error += " (before the cell started)"
    base = record or CellStatus(status="failed")
    write_status(
        cell.run_dir, base.model_copy(update={"status": "failed", "ended": now, "error": error[:2000]})
    )
    _log(cell, error)
    return CellResult(cell.name, "failed", now - (started or submitted), error[:2000])


def _log(cell: Cell, line: str) -> None:
    """A line of the sweep's own at the end of the cell's log (what it decided for a cell that could not say it)."""
    with open(cell.run_dir / LOG, "a", encoding="utf-8") as log:
        log.write(f"--- pats sweep: {line}\n")
