"""A cell's status.json on its own (pats.sweep.record), from the mutation run of record.py: the record
a cell starts with and each state it may reach, how long an attempt ran, the file written where the
folder does not exist yet and read back (or not), and which `running` records name a process gone."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from pats.sweep import record
from pats.sweep.record import STATUS, CellStatus, gone, pending_after, read_status, running_here, write_status


def test_the_record_a_cell_starts_with_and_every_state_it_reaches():
    assert json.loads(CellStatus(status="pending").model_dump_json()) == {
        "status": "pending", "started": None, "ended": None, "how": "", "error": "", "traceback": "",
        "host": "", "pid": 0, "attempts": 0, "earlier_s": 0.0,
    }  # fmt: skip
    for state in ("pending", "running", "finished", "failed", "interrupted"):
        assert CellStatus(status=state).status == state
    for how in ("", "ran", "resumed"):
        assert CellStatus(status="finished", how=how).how == how


def test_seconds_of_an_attempt_not_started_ended_and_running():
    assert CellStatus(status="pending").seconds is None
    assert CellStatus(status="finished", started=100.0, ended=160.5).seconds == 60.5
    started = time.time() - 30
    assert 30 <= CellStatus(status="running", started=started).seconds < 60


def test_written_where_the_folder_does_not_exist_yet_and_read_back(tmp_path):
    run_dir = tmp_path / "sweep" / "cell"
    status = running_here()
    write_status(run_dir, status)
    assert (run_dir / STATUS).read_text() == status.model_dump_json(indent=1)
    assert read_status(run_dir) == status
    assert (status.status, status.host) == ("running", socket.gethostname()) and status.pid > 0
    assert read_status(tmp_path) is None  # no record
    (tmp_path / STATUS).write_text('{"status": "done"}')
    assert read_status(tmp_path) is None  # unreadable: as if none


SIGNALS_DEFAULT = (
    "import signal\n"
    "for s in signal.valid_signals():\n"
    "    try: signal.signal(s, signal.SIG_DFL)\n"
    "    except (OSError, ValueError): pass\n"
)


def test_a_running_record_is_gone_only_where_its_process_on_this_machine_is(monkeypatch):
    here = socket.gethostname()
    # every signal back to its default action (a run under nohup ignores SIGHUP), so one sent would end it
    alive = subprocess.Popen([sys.executable, "-c", SIGNALS_DEFAULT + "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        assert gone(CellStatus(status="running", host=here, pid=dead.pid)) is True
        assert gone(CellStatus(status="running", host=here, pid=alive.pid)) is False
        with pytest.raises(subprocess.TimeoutExpired):  # asked, not signalled (a signal lands later)
            alive.wait(timeout=1)
        assert gone(CellStatus(status="finished", host=here, pid=dead.pid)) is False
        assert gone(CellStatus(status="running", host=here + "-other", pid=dead.pid)) is False
        assert gone(CellStatus(status="running", host=here, pid=0)) is False
    finally:
        alive.kill()
        alive.wait()

    def refused(pid, signal):
        raise PermissionError(pid)

    monkeypatch.setattr(record.os, "kill", refused)  # another user's process: it exists
    assert gone(CellStatus(status="running", host=here, pid=dead.pid)) is False


@pytest.mark.parametrize("state", ["pending", "finished", "failed", "interrupted"])
def test_only_a_running_record_can_be_gone(state):
    assert gone(CellStatus(status=state, host=socket.gethostname(), pid=2**22 + 1)) is False


def test_each_record_carries_the_attempts_and_the_time_of_those_that_ended():
    """Issue 59, item 5: the status time counted the last attempt only."""
    first = running_here()
    assert (first.attempts, first.earlier_s, first.total_seconds is not None) == (1, 0.0, True)
    assert pending_after(None) == CellStatus(status="pending")
    ended = first.model_copy(update={"status": "interrupted", "started": 100.0, "ended": 160.0})
    waiting = pending_after(ended)
    assert waiting == CellStatus(status="pending", attempts=1, earlier_s=60.0)
    assert (waiting.seconds, waiting.total_seconds) == (None, 60.0)  # between attempts: the time so far
    second = running_here(waiting)
    assert (second.attempts, second.earlier_s) == (2, 60.0)
    done = second.model_copy(update={"status": "finished", "started": 200.0, "ended": 230.5})
    assert done.total_seconds == 90.5
    killed = second.model_copy(update={"started": 200.0, "ended": None})  # its process gone, no end
    assert pending_after(killed) == CellStatus(status="pending", attempts=2, earlier_s=60.0)
    assert CellStatus(status="pending").total_seconds is None
    assert running_here(CellStatus(status="pending", attempts=3, earlier_s=5.0)).attempts == 4
