"""What pats/sweep/cluster.py decides without Ray itself (issue 49, item 8): each cell's asks (the
sweep's own, or a 1/N share of the machine and of what Ray measured), the record and log line of a cell
whose Ray worker died, which queued cells a signal leaves pending, and the interruption a Ray error
carries, and how the collecting loop ends after the user stopped the sweep (a worker ended by the
stop passed on is interrupted, not failed; after a second signal the cells still running once
AT_ONCE_S passed are recorded interrupted). `run_ray` itself needs a Ray instance
(tests/test_sweep_parallel.py); these run in milliseconds, so they can be the mutation runner's tests for these functions."""

from __future__ import annotations

import signal
import socket
import time

import pytest

from pats.errors import RunInterrupted
from pats.sweep import SweepSpec, cells
from pats.sweep import cluster as cluster_module
from pats.sweep import stop as stop_module
from pats.sweep.cell import CellResult
from pats.sweep.cluster import (
    GIB,
    Asks,
    _cancel_queued,
    _cancelled,
    _cause,
    _collect,
    _share,
    _stop_running,
    asks_for,
    worker_died,
)
from pats.sweep.record import CellStatus, read_status, write_status
from pats.sweep.stop import DriverSignals


def three_cells(repo, tmp_path):
    sweep = SweepSpec(name="three", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0, 1, 2),
                      root=str(tmp_path), overrides=("logging.wandb=disabled",))  # fmt: skip
    return cells(sweep)


def test_without_parallel_a_cell_asks_what_the_sweep_says(monkeypatch):
    monkeypatch.setattr(cluster_module, "machine_cpus", lambda: 8)
    sweep = SweepSpec(specs=("a.yaml",), cpus=3.0, gpus=0.5, memory=12.0)
    assert asks_for(sweep, None) == Asks(3.0, 0.5, 12.0, None)
    assert asks_for(sweep, 0) == Asks(3.0, 0.5, 12.0, None)


def test_with_parallel_a_cell_asks_its_share_of_this_machines_cpus(monkeypatch):
    monkeypatch.setattr(cluster_module, "machine_cpus", lambda: 8)
    sweep = SweepSpec(specs=("a.yaml",), cpus=3.0, gpus=0.5, memory=12.0)
    assert asks_for(sweep, 2) == Asks(4.0, 0.0, 0.0, 2)  # GPUs and memory once Ray has measured them
    assert asks_for(sweep, 3) == Asks(8 / 3, 0.0, 0.0, 3)


def test_a_cell_gets_a_thread_per_whole_cpu_it_asks_and_at_least_one():
    assert [Asks(c, 0.0, 0.0).threads for c in (0.5, 1.0, 2.7, 4.0)] == [1, 1, 2, 4]


def test_the_asks_read_as_printed():
    assert Asks(0.5, 0.0, 0.0).text() == "0.5 CPU, 0 GPU each"
    assert Asks(2.0, 1.0, 7.5).text() == "2 CPU, 1 GPU, 7.5 GiB each"


def test_the_share_divides_gpus_and_memory_and_keeps_the_cpus():
    resources = {"CPU": 16.0, "GPU": 3.0, "memory": 10 * GIB}
    assert _share(resources, Asks(8.0, 0.0, 0.0, 2)) == Asks(8.0, 1, 5.0, 2)  # 1.5 GPUs: one whole
    assert _share(resources, Asks(4.0, 0.0, 0.0, 4)) == Asks(4.0, 0.75, 2.5, 4)  # under one: the fraction
    assert _share(resources, Asks(16 / 3, 0.0, 0.0, 3)) == Asks(16 / 3, 1, 3.3, 3)  # memory rounded down
    assert _share({"CPU": 2.0}, Asks(1.0, 0.0, 0.0, 2)) == Asks(1.0, 0.0, 0.0, 2)  # no GPU, no memory
    assert _share(resources, Asks(16.0, 0.0, 0.0, None)) == Asks(16.0, 3, 10.0, 1)  # no N: all of it


def test_a_worker_that_died_while_its_cell_ran_fails_the_cell_timed_from_its_start(repo, tmp_path):
    cell = three_cells(repo, tmp_path)[0]
    started = time.time() - 30
    write_status(cell.run_dir, CellStatus(status="running", started=started, host="node-1", pid=42))
    before = time.time()
    result = worker_died(cell, started - 100, "its Ray worker died: OutOfMemoryError: killed")
    after = time.time()
    record = read_status(cell.run_dir)
    assert record is not None and record.status == "failed"
    assert (record.started, record.host, record.pid) == (started, "node-1", 42)  # the attempt's own record
    assert record.ended is not None and before <= record.ended <= after
    assert record.error == result.error == "its Ray worker died: OutOfMemoryError: killed"
    assert (result.name, result.status) == (cell.name, "failed")
    assert before - started <= result.seconds <= after - started  # not from the submission, 100 s earlier
    log = (cell.run_dir / "log.txt").read_text()
    assert log == "--- pats sweep: its Ray worker died: OutOfMemoryError: killed\n"


@pytest.mark.parametrize("record", [None, CellStatus(status="pending")], ids=["no record", "pending"])
def test_a_worker_that_died_before_its_cell_started_is_timed_from_the_submission(repo, tmp_path, record):
    cell = three_cells(repo, tmp_path)[0]
    if record is not None:
        write_status(cell.run_dir, record)
    else:
        cell.run_dir.mkdir(parents=True)
    submitted = time.time() - 20
    before = time.time()
    result = worker_died(cell, submitted, "its Ray worker died: RaySystemError: x")
    after = time.time()
    error = "its Ray worker died: RaySystemError: x (before the cell started)"
    status = read_status(cell.run_dir)
    assert status is not None
    assert (status.status, status.started, status.error) == ("failed", None, error)
    assert status.ended is not None and before <= status.ended <= after
    assert result.error == error
    assert before - submitted <= result.seconds <= after - submitted
    assert (cell.run_dir / "log.txt").read_text() == f"--- pats sweep: {error}\n"


def test_a_died_workers_error_is_cut_at_2000_characters_where_it_is_kept_and_whole_in_the_log(repo, tmp_path):
    cell = three_cells(repo, tmp_path)[0]
    write_status(cell.run_dir, CellStatus(status="running", started=time.time()))
    error = "its Ray worker died: " + "x" * 3000
    result = worker_died(cell, time.time(), error)
    status = read_status(cell.run_dir)
    assert status is not None and status.error == result.error == error[:2000]
    assert (cell.run_dir / "log.txt").read_text() == f"--- pats sweep: {error}\n"


def test_a_died_workers_line_goes_after_what_the_cell_logged(repo, tmp_path):
    cell = three_cells(repo, tmp_path)[0]
    write_status(cell.run_dir, CellStatus(status="running", started=time.time()))
    (cell.run_dir / "log.txt").write_text("step 1\n")
    worker_died(cell, time.time(), "its Ray worker died: E")
    assert (cell.run_dir / "log.txt").read_text() == "step 1\n--- pats sweep: its Ray worker died: E\n"


class Cancels:
    """What `_cancel_queued` uses of Ray: `cancel`."""

    def __init__(self):
        self.cancelled: list[str] = []

    def cancel(self, ref):
        self.cancelled.append(ref)


def test_after_a_signal_only_the_cells_still_pending_are_cancelled(repo, tmp_path):
    first, second, third = three_cells(repo, tmp_path)
    write_status(first.run_dir, CellStatus(status="pending"))
    write_status(second.run_dir, CellStatus(status="running", started=time.time()))
    # third: no record yet (its worker has not written one): not known to be pending, left to Ray
    ray = Cancels()
    _cancel_queued(ray, {"ref-0": (0, first), "ref-1": (1, second), "ref-2": (2, third)})
    assert ray.cancelled == ["ref-0"]


def test_every_pending_cell_is_cancelled_not_only_the_first(repo, tmp_path):
    queued = three_cells(repo, tmp_path)
    for cell in queued:
        write_status(cell.run_dir, CellStatus(status="pending"))
    ray = Cancels()
    _cancel_queued(ray, {f"ref-{i}": (i, cell) for i, cell in enumerate(queued)})
    assert ray.cancelled == ["ref-0", "ref-1", "ref-2"]


def test_a_cell_cancelled_as_it_started_is_recorded_interrupted_and_a_pending_one_stays_pending(
    repo, tmp_path
):
    """Seen in CI (2026-12-06): the queued cell's record said `running` after the sweep stopped, as Ray
    cancelled it once its worker had started it and the sweep then stopped Ray."""
    started, queued, unplanned = three_cells(repo, tmp_path)
    began = time.time() - 2
    write_status(started.run_dir, CellStatus(status="running", started=began, host="node-1", pid=42))
    write_status(queued.run_dir, CellStatus(status="pending"))
    before = time.time()
    assert [_cancelled(cell) for cell in (started, queued, unplanned)] == [True, False, False]
    record = read_status(started.run_dir)
    assert record is not None and record.status == "interrupted"
    assert (record.started, record.host, record.pid) == (began, "node-1", 42)
    assert record.ended is not None and before <= record.ended <= time.time()
    assert (started.run_dir / "log.txt").read_text() == (
        "--- pats sweep: cancelled as it started, after the sweep or another cell was interrupted\n"
    )
    assert read_status(queued.run_dir) == CellStatus(status="pending")
    assert not (queued.run_dir / "log.txt").exists()
    assert not unplanned.run_dir.exists()  # no record: nothing written


class RayTaskError(RunInterrupted):
    """As Ray raises a task's exception: a copy of its type that carries the original as `cause`."""

    def __init__(self, cause: BaseException | None):
        super().__init__("wrapped", 2)
        self.cause = cause


def test_the_interruption_raised_is_the_cells_own():
    own = RunInterrupted("stopped by SIGTERM at step 3", 15)
    assert _cause(RayTaskError(own)) is own
    plain = RunInterrupted("stopped by SIGINT", 2)
    assert _cause(plain) is plain  # raised here, not through Ray
    odd = RayTaskError(ValueError("not an interruption"))
    assert _cause(odd) is odd


class ScriptedRay:
    """What `_collect` uses of Ray: `wait` (the refs in `ready`, one a call, then none), `get` (the
    result or error given per ref), `cancel`, and `exceptions.TaskCancelledError`."""

    class exceptions:  # noqa: N801 (as Ray names it)
        class TaskCancelledError(Exception):
            pass

    def __init__(self, ready: list[str | None], outcomes: dict):
        self.ready, self.outcomes = list(ready), outcomes
        self.cancelled: list[str] = []
        self.waits = 0

    def wait(self, refs, num_returns, timeout):
        self.waits += 1  # a loop that does not end (a mutant's) fails the test instead of hanging it
        assert self.waits < 1000, "the sweep kept waiting for cells that will not come back"
        done: list[str] = []
        while self.ready and len(done) < num_returns:  # None in `ready`: nothing ready at that wait
            ref = self.ready.pop(0)
            if ref is None:
                break
            done.append(ref)
        if not done:
            time.sleep(timeout)  # as Ray's wait blocks up to its timeout
        return done, [r for r in refs if r not in done]

    def get(self, ref):
        outcome = self.outcomes[ref]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self, ref):
        self.cancelled.append(ref)


def test_a_worker_that_ends_after_the_sweep_passed_a_stop_on_is_interrupted_not_failed(repo, tmp_path):
    """Issue 59, item 2: a second SIGTERM can reach a cell outside its training steps, where it ends
    its worker: that cell was stopped, not failed."""
    cell = three_cells(repo, tmp_path)[0]
    write_status(cell.run_dir, CellStatus(status="running", started=time.time() - 5, host="node-1", pid=42))
    signals = DriverSignals()
    signals.received, signals.passed = [signal.SIGTERM, signal.SIGTERM], 2  # both already passed on
    other = three_cells(repo, tmp_path)[1]
    done = CellResult(other.name, "ran", 2.0)
    ray = ScriptedRay(["ref-1", "ref-2"], {"ref-1": RuntimeError("the worker died"), "ref-2": done})
    results: dict = {}
    lines: list[str] = []
    pending = {"ref-1": (1, cell), "ref-2": (2, other)}
    stopped, signum = _collect(ray, pending, 3, time.time(), signals, lines.append, results)
    assert (stopped, signum, results) == ([cell.name], None, {2: done})  # and the next cell's result
    assert lines == [f"cell 2/3 {other.name}: ran in 2 s ({other.run_dir})"]
    record = read_status(cell.run_dir)
    assert record is not None and record.status == "interrupted" and record.error == ""
    assert (cell.run_dir / "log.txt").read_text() == (
        "--- pats sweep: its Ray worker ended after the sweep passed the stop on: RuntimeError\n"
    )


def test_after_a_second_signal_the_sweep_waits_at_most_at_once_s_then_records_the_cells_still_running(
    repo, tmp_path, monkeypatch
):
    running, queued, _ = three_cells(repo, tmp_path)
    write_status(
        running.run_dir, CellStatus(status="running", started=1.0, host=socket.gethostname(), pid=4242)
    )
    write_status(queued.run_dir, CellStatus(status="pending"))
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(stop_module.os, "kill", lambda pid, signum: killed.append((pid, signum)))
    monkeypatch.setattr(cluster_module, "AT_ONCE_S", 0.2)
    monkeypatch.setattr(cluster_module, "POLL_S", 0.01)
    signals = DriverSignals()
    signals.received, signals.passed = [signal.SIGTERM, signal.SIGTERM], 1  # the second not yet passed
    pending = {"ref-1": (1, running), "ref-2": (2, queued)}
    lines: list[str] = []
    ray = ScriptedRay([], {})  # nothing comes back
    start = time.monotonic()
    stopped, signum = _collect(ray, pending, 3, time.time(), signals, lines.append, {})
    assert time.monotonic() - start >= 0.2  # AT_ONCE_S after the signal was passed on, not at once
    assert (stopped, signum, killed) == ([], None, [(4242, signal.SIGTERM)])
    assert lines == ["SIGTERM again: stopping the running cells at once (their steps in flight are lost)"]
    assert list(pending) == ["ref-1", "ref-2"]  # none came back before the deadline
    assert _stop_running(pending) == [running.name]
    record = read_status(running.run_dir)
    assert record is not None and record.status == "interrupted" and record.ended is not None
    assert (running.run_dir / "log.txt").read_text() == (
        "--- pats sweep: stopped with Ray after a second signal, before the cell recorded its stop\n"
    )
    assert read_status(queued.run_dir) == CellStatus(status="pending")


def test_the_collecting_loop_reports_each_cell_as_it_ends(repo, tmp_path, monkeypatch):
    """_collect's branches without a signal: a result (its line), a cell a signal stopped in its worker
    (its line, the queued cells cancelled, the stop's signal returned), a cancelled queued cell that had
    started (recorded interrupted, counted stopped) and a worker that died (failed)."""
    ran, stopped_cell, started, died = cells(
        SweepSpec(
            name="four",
            specs=(str(repo / "experiments/quickstart.yaml"),),
            seeds=(0, 1, 2, 3),
            root=str(tmp_path),
            overrides=("logging.wandb=disabled",),
        )  # fmt: skip
    )
    write_status(started.run_dir, CellStatus(status="running", started=time.time(), host="node-1", pid=7))
    write_status(died.run_dir, CellStatus(status="running", started=time.time() - 3, host="node-1", pid=8))
    interrupted = RayTaskError(
        RunInterrupted("stopped at your request after step 1 (checkpointed). More", 15)
    )
    ray = ScriptedRay(
        ["ref-1", "ref-2", "ref-3", "ref-4"],
        {
            "ref-1": CellResult(ran.name, "ran", 12.0),
            "ref-2": interrupted,
            "ref-3": ScriptedRay.exceptions.TaskCancelledError(),
            "ref-4": RuntimeError("OOM"),
        },
    )
    pending = {f"ref-{i}": (i, cell) for i, cell in enumerate((ran, stopped_cell, started, died), 1)}
    results: dict = {}
    lines: list[str] = []
    signals = DriverSignals()
    stopped, signum = _collect(ray, pending, 4, time.time() - 10, signals, lines.append, results)
    assert (stopped, signum, pending) == ([stopped_cell.name, started.name], 15, {})
    assert results[1] == CellResult(ran.name, "ran", 12.0)
    assert results[4].status == "failed" and results[4].error == "its Ray worker died: RuntimeError: OOM"
    assert sorted(results) == [1, 4]
    assert lines[:2] == [
        f"cell 1/4 {ran.name}: ran in 12 s ({ran.run_dir})",
        f"cell 2/4 {stopped_cell.name}: interrupted: stopped at your request after step 1 (checkpointed) "
        f"(log: {stopped_cell.run_dir / 'log.txt'})",
    ]
    assert lines[2].startswith(f"cell 4/4 {died.name}: FAILED after ") and len(lines) == 3
    assert lines[2].endswith(f" s: its Ray worker died: RuntimeError: OOM (log: {died.run_dir / 'log.txt'})")
    record = read_status(started.run_dir)
    assert record is not None and record.status == "interrupted"
    assert ray.cancelled == []  # when the cell was stopped, the cells left were running: none cancelled


def test_after_a_first_signal_the_sweep_waits_for_its_cells_as_long_as_they_take(repo, tmp_path, monkeypatch):
    """The first signal is passed on and the loop goes on until every cell is back (no deadline: that
    is the second signal's), through waits that return nothing."""
    cell = three_cells(repo, tmp_path)[0]
    write_status(cell.run_dir, CellStatus(status="running", started=1.0, host="node-2", pid=9))
    monkeypatch.setattr(cluster_module, "AT_ONCE_S", 0.0)
    monkeypatch.setattr(cluster_module, "POLL_S", 0.0)
    signals = DriverSignals()
    signals.received = [signal.SIGINT]
    stopped_there = RayTaskError(RunInterrupted("stopped at your request after step 2 (checkpointed)", 15))
    ray = ScriptedRay([None, None, "ref-1"], {"ref-1": stopped_there})
    lines: list[str] = []
    pending = {"ref-1": (1, cell)}
    stopped, signum = _collect(ray, pending, 1, time.time(), signals, lines.append, {})
    assert (stopped, signum, pending, ray.cancelled) == ([cell.name], 15, {}, ["ref-1"])  # on node-2: Ray
    assert lines == [
        "SIGINT: stopping each running cell after its step in flight (it is checkpointed); cells not started "
        "stay pending; send it again to stop them at once",
        f"cell 1/1 {cell.name}: interrupted: stopped at your request after step 2 (checkpointed) "
        f"(log: {cell.run_dir / 'log.txt'})",
    ]
