"""A sweep stopped at the user's request (pats/sweep/stop.py, issue 59, items 2 and 5): the signals the
sweep's own process keeps while its cells run as Ray tasks, the stop passed on to each running cell's
process (and queued cells cancelled), the line printed for a stopped cell and the message the sweep
stops with, which says to rerun the sweep. Without Ray: milliseconds each. The stop through a real
local Ray is in tests/test_sweep_parallel.py."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from pats.errors import RunInterrupted
from pats.sweep import SweepSpec, cells
from pats.sweep import stop as stop_module
from pats.sweep.record import CellStatus, write_status
from pats.sweep.stop import AT_ONCE_S, DriverSignals, interrupted_line, pass_on, sweep_stopped


def four_cells(repo, tmp_path):
    sweep = SweepSpec(name="four", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0, 1, 2, 3),
                      root=str(tmp_path), overrides=("logging.wandb=disabled",))  # fmt: skip
    return cells(sweep)


def test_the_sweeps_process_counts_the_signals_and_restores_the_handlers_before():
    def before(signum, frame):
        raise AssertionError("the handler before was called within the block")

    saved = signal.signal(signal.SIGTERM, before)
    try:
        with DriverSignals() as signals:
            assert signals.unpassed() is None
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)  # not a KeyboardInterrupt: counted as well
            time.sleep(0.01)  # (Python runs the handlers between bytecodes)
            assert signals.received == [signal.SIGTERM, signal.SIGINT]
            assert signals.unpassed() == signal.SIGINT  # the latest, both now passed
            assert signals.unpassed() is None
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            assert signals.unpassed() == signal.SIGTERM and signals.passed == 3
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, saved)


class FakeRay:
    """What `pass_on` uses of Ray: `cancel`."""

    def __init__(self):
        self.cancelled: list[str] = []

    def cancel(self, ref):
        self.cancelled.append(ref)


def test_the_first_signal_goes_to_each_running_cell_here_and_queued_cells_are_cancelled(
    repo, tmp_path, monkeypatch
):
    here, elsewhere, queued, ended = four_cells(repo, tmp_path)
    write_status(here.run_dir, CellStatus(status="running", started=1.0, host=socket.gethostname(), pid=4242))
    write_status(elsewhere.run_dir, CellStatus(status="running", started=1.0, host="node-2", pid=4343))
    write_status(queued.run_dir, CellStatus(status="pending"))
    write_status(ended.run_dir, CellStatus(status="interrupted", started=1.0, ended=2.0, pid=4444))
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(stop_module.os, "kill", lambda pid, signum: killed.append((pid, signum)))
    ray, lines = FakeRay(), list[str]()
    pending = {f"ref-{i}": (i, cell) for i, cell in enumerate((here, elsewhere, queued, ended), 1)}
    pass_on(ray, pending, signal.SIGINT, True, lines.append)
    assert killed == [(4242, signal.SIGTERM)]  # SIGTERM whichever came: Ray's processes block SIGINT
    assert ray.cancelled == ["ref-2", "ref-3"]  # the one on another node through Ray; the queued one
    assert lines == [
        "SIGINT: stopping each running cell after its step in flight (it is checkpointed); cells not "
        "started stay pending; send it again to stop them at once"
    ]

    killed.clear()
    ray, lines = FakeRay(), list[str]()
    pass_on(ray, pending, signal.SIGTERM, False, lines.append)  # the second: queued ones were cancelled
    assert killed == [(4242, signal.SIGTERM)] and ray.cancelled == ["ref-2"]
    assert lines == ["SIGTERM again: stopping the running cells at once (their steps in flight are lost)"]


def test_a_record_without_a_pid_is_asked_through_ray_never_sent_to_pid_0(repo, tmp_path, monkeypatch):
    """os.kill(0, ...) would signal the sweep's own process group; pid 1 is a process like another."""
    no_pid, first = four_cells(repo, tmp_path)[:2]
    here = socket.gethostname()
    write_status(no_pid.run_dir, CellStatus(status="running", started=1.0, host=here, pid=0))
    write_status(first.run_dir, CellStatus(status="running", started=1.0, host=here, pid=1))
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(stop_module.os, "kill", lambda pid, signum: killed.append((pid, signum)))
    ray = FakeRay()
    pass_on(ray, {"ref-1": (1, no_pid), "ref-2": (2, first)}, signal.SIGTERM, True, lambda line: None)
    assert (killed, ray.cancelled) == ([(1, signal.SIGTERM)], ["ref-1"])


def test_the_wait_after_a_second_signal_is_the_one_the_docs_give():
    assert f"waits at most {AT_ONCE_S:g} s" in (Path(__file__).parents[1] / "docs/ablations.md").read_text()


def test_a_cell_whose_process_is_gone_is_passed_over(repo, tmp_path, monkeypatch):
    (cell, *_) = four_cells(repo, tmp_path)
    write_status(cell.run_dir, CellStatus(status="running", started=1.0, host=socket.gethostname(), pid=4242))

    def gone(pid, signum):
        raise ProcessLookupError

    monkeypatch.setattr(stop_module.os, "kill", gone)
    ray = FakeRay()
    pass_on(ray, {"ref-1": (1, cell)}, signal.SIGTERM, True, lambda line: None)
    assert ray.cancelled == []


def test_a_stopped_cells_line_keeps_the_runs_first_sentence_and_names_its_log(repo, tmp_path):
    cell = four_cells(repo, tmp_path)[1]
    err = RunInterrupted(
        f"stopped at your request after step 1 (checkpointed). The run directory is intact (its last "
        f"checkpoint is step 1): continue with `pats run --resume {cell.run_dir}`",
        signal.SIGTERM,
    )
    assert interrupted_line(2, 4, cell, err) == (
        f"cell 2/4 quickstart-s1: interrupted: stopped at your request after step 1 (checkpointed) "
        f"(log: {cell.run_dir / 'log.txt'})"
    )


def test_the_sweep_stops_saying_which_cells_stopped_and_to_rerun_it(tmp_path):
    stopped = sweep_stopped(tmp_path, ["quickstart-s0", "quickstart-s1"], signal.SIGTERM)
    assert stopped.exit_code == 143
    assert str(stopped) == (
        "the sweep stopped at your request: 2 cells stopped (quickstart-s0, quickstart-s1). Rerun the same "
        "`pats sweep` command to go on: finished cells are skipped, stopped ones resume from their last "
        f"checkpoint, the others start (`pats sweep status {tmp_path}` shows each cell)"
    )
    assert str(sweep_stopped(tmp_path, ["a-s0"], signal.SIGINT)).startswith(
        "the sweep stopped at your request: 1 cell stopped (a-s0). Rerun"
    )
    assert sweep_stopped(tmp_path, [], signal.SIGINT).exit_code == 130
    assert str(sweep_stopped(tmp_path, [], signal.SIGINT)).startswith(
        "the sweep stopped at your request: no running cell was stopped. Rerun"
    )
