"""`pats sweep status SWEEP` (pats.sweep.status), from the mutation run of status.py: each row
`status_rows` makes (a cell with no folder, pending or missing; a folder with no record, run before
issue 49; a record, with a running one whose process is gone read as interrupted, a failed one's
error and log, a live one's host and pid, and whether it is evaluating: its step's review logged, not
its end, and an evaluation due after that step), the whole printed table, the duration formatter, the
refusal of a folder with no manifest, and the row being frozen."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from pats.errors import PrerequisiteError
from pats.logging.events import EventLog
from pats.spec import load_spec, spec_to_yaml
from pats.sweep.manifest import ManifestCell, write_manifest
from pats.sweep.record import LOG, CellStatus, write_status
from pats.sweep.status import StatusRow, _duration, status_rows, status_table

T0 = datetime(2024, 1, 2, 3, 4, 5).timestamp()  # local time: stamped "2024-01-02 03:04:05"
STAMP = "2024-01-02 03:04:05"
GONE_NOTE = "no status record (run by pats before issue 49)"
MISSING_NOTE = "its folder is not here (copied or moved without it?)"


def _cell(name: str, run_dir: str) -> ManifestCell:
    return ManifestCell(name=name, condition="c", seed=0, spec="spec.yaml", overrides=(), run_dir=run_dir)


def _run(repo: Path, run_dir: Path, ends: int | None, reviewed: bool = False, every: int = 3) -> None:
    """spec.yaml (3 steps, an evaluation every `every`) and, unless `ends` is None, events.jsonl with
    that many step ends and, with `reviewed`, the next step's review logged (its groups), not its end."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(repo / "experiments/quickstart.yaml", ["trainer.steps=3", f"eval.every={every}"])
    (run_dir / "spec.yaml").write_text(spec_to_yaml(spec))
    if ends is not None:
        log = EventLog(run_dir / "events.jsonl")
        for step in range(ends):
            log.write(step, "groups", groups=[])
            log.end_step(step)
        if reviewed:
            log.write(ends, "groups", groups=[])
        log.close()


@pytest.fixture
def dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


@pytest.fixture
def sweep(tmp_path, repo, dead_pid) -> Path:
    folder = tmp_path / "sw"
    folder.mkdir()
    here = socket.gethostname()
    names = "a-old b-miss c-bare d-start e-done f-intr g-fail h-fail0 i-run j-fin k-pend l-eval m-new n-mid o-rev".split()
    cells = [_cell(n, str(folder / n) if n == "a-old" else n) for n in names]
    write_manifest(folder, "sw", cells, ())
    (folder / "c-bare").mkdir()  # a folder, no spec, no record
    _run(repo, folder / "d-start", None)  # spec, no events: 0 of 3
    _run(repo, folder / "e-done", 3)
    _run(repo, folder / "f-intr", 1)
    write_status(
        folder / "f-intr", CellStatus(status="running", started=T0, ended=T0 + 61, host=here, pid=dead_pid)
    )
    _run(repo, folder / "g-fail", 2)
    write_status(
        folder / "g-fail", CellStatus(status="failed", started=T0, ended=T0 + 3661, error="boom\nmore")
    )
    write_status(folder / "h-fail0", CellStatus(status="failed", started=T0, ended=T0 + 59))
    _run(repo, folder / "i-run", 2)
    write_status(
        folder / "i-run", CellStatus(status="running", started=T0, ended=T0 + 59, host=here, pid=os.getpid())
    )
    write_status(folder / "j-fin", CellStatus(status="finished", started=T0, ended=T0 + 3599, how="ran"))
    write_status(folder / "k-pend", CellStatus(status="pending"))
    running = CellStatus(status="running", started=T0, ended=T0 + 60, host=here, pid=os.getpid())
    _run(repo, folder / "l-eval", 2, reviewed=True)  # the last step reviewed, not ended: evaluating
    write_status(folder / "l-eval", running)
    _run(repo, folder / "n-mid", 1, reviewed=True, every=2)  # step 2 of 3 reviewed, an evaluation due
    write_status(folder / "n-mid", running)
    _run(repo, folder / "o-rev", 1, reviewed=True)  # step 2 of 3 reviewed, no evaluation due
    write_status(folder / "o-rev", running)
    # just started: no spec yet, so no steps to have ended
    write_status(
        folder / "m-new", CellStatus(status="running", started=T0, ended=T0 + 1, host=here, pid=os.getpid())
    )
    return folder


def test_every_kind_of_row(sweep, dead_pid):
    here, pid = socket.gethostname(), os.getpid()
    assert status_rows(sweep) == [
        StatusRow("a-old", "pending", "-", "-", None, ""),
        StatusRow("b-miss", "missing", "-", "-", None, MISSING_NOTE),
        StatusRow("c-bare", "pending", "-", "-", None, ""),
        StatusRow("d-start", "started", "0/3", "-", None, GONE_NOTE),
        StatusRow("e-done", "finished", "3/3", "-", None, GONE_NOTE),
        StatusRow("f-intr", "interrupted", "1/3", STAMP, 61.0, f"its process (pid {dead_pid}) is gone"),
        StatusRow("g-fail", "failed", "2/3", STAMP, 3661.0, f"boom; log: {sweep / 'g-fail' / LOG}"),
        StatusRow("h-fail0", "failed", "-", STAMP, 59.0, f"failed; log: {sweep / 'h-fail0' / LOG}"),
        StatusRow("i-run", "running", "2/3", STAMP, 59.0, f"on {here}, pid {pid}"),
        StatusRow("j-fin", "finished", "-", STAMP, 3599.0, ""),
        StatusRow("k-pend", "pending", "-", "-", None, ""),
        StatusRow("l-eval", "running", "2/3", STAMP, 60.0, f"on {here}, pid {pid}; in its final evaluation"),
        StatusRow("m-new", "running", "-", STAMP, 1.0, f"on {here}, pid {pid}"),
        StatusRow("n-mid", "running", "1/3", STAMP, 60.0, f"on {here}, pid {pid}; evaluating after step 2"),
        StatusRow("o-rev", "running", "1/3", STAMP, 60.0, f"on {here}, pid {pid}"),
    ]


def test_the_whole_table(sweep, dead_pid):
    here, pid = socket.gethostname(), os.getpid()
    assert status_table(sweep) == "\n".join([
        f"sweep {sweep}: 15 cells, 3 pending, 1 missing, 1 started, 2 finished, 1 interrupted, 2 failed, 5 running",
        "cell     status       steps  started              time    note",
        "a-old    pending      -      -                    -",
        f"b-miss   missing      -      -                    -       {MISSING_NOTE}",
        "c-bare   pending      -      -                    -",
        f"d-start  started      0/3    -                    -       {GONE_NOTE}",
        f"e-done   finished     3/3    -                    -       {GONE_NOTE}",
        f"f-intr   interrupted  1/3    {STAMP}  1m01s   its process (pid {dead_pid}) is gone",
        f"g-fail   failed       2/3    {STAMP}  1h01m   boom; log: {sweep / 'g-fail' / LOG}",
        f"h-fail0  failed       -      {STAMP}  59s     failed; log: {sweep / 'h-fail0' / LOG}",
        f"i-run    running      2/3    {STAMP}  59s     on {here}, pid {pid}",
        f"j-fin    finished     -      {STAMP}  59m59s",
        "k-pend   pending      -      -                    -",
        f"l-eval   running      2/3    {STAMP}  1m00s   on {here}, pid {pid}; in its final evaluation",
        f"m-new    running      -      {STAMP}  1s      on {here}, pid {pid}",
        f"n-mid    running      1/3    {STAMP}  1m00s   on {here}, pid {pid}; evaluating after step 2",
        f"o-rev    running      1/3    {STAMP}  1m00s   on {here}, pid {pid}",
    ])  # fmt: skip


def test_durations():
    assert [_duration(s) for s in (None, 0, 59, 59.6, 61, 3599, 3600, 3661, 7322)] == [
        "-", "0s", "59s", "1m00s", "1m01s", "59m59s", "1h00m", "1h01m", "2h02m",
    ]  # fmt: skip


def test_a_folder_with_no_manifest_is_refused(tmp_path):
    with pytest.raises(PrerequisiteError) as err:
        status_rows(tmp_path)
    assert str(err.value) == (
        f"{tmp_path} holds no sweep.json: give a sweep folder (<root>/<name>, e.g. runs/sweeps/NAME)"
    )


def test_a_row_is_frozen():
    row = StatusRow("a", "pending", "-", "-", None, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = "failed"  # type: ignore[misc]


def test_a_run_reads_as_evaluating_while_its_evaluations_play(repo, tmp_path):
    """The engine puts a step's review on disk before the evaluation after it, so `pats sweep status`
    sees it while the evaluation plays (the event log is buffered until the step's end otherwise)."""
    from pats.engine.run import new_run
    from pats.sweep.status import _progress
    from pats.testing.fakes import ScriptedBackend, improving_schedule
    from pats.testing.sweep import train_on_fakes

    overrides = ["trainer.steps=3", "trainer.tasks_per_step=2", "eval.every=2", "eval.gap_tasks=0",
                 "logging.wandb=disabled", "logging.progress=false", f"logging.root={tmp_path}"]  # fmt: skip
    # plain GRPO: a step logs its groups and no cards, a line that stays in the buffer unless flushed
    spec = load_spec(repo / "experiments/baselines/grpo.yaml", overrides)
    run_dir = new_run(spec)
    seen = []

    class Watched(ScriptedBackend):
        async def evaluate(self, tasks, views):
            seen.append(_progress(run_dir))
            return await super().evaluate(tasks, views)

    train_on_fakes(spec, run_dir, None, lambda s: Watched(improving_schedule(), seed=s.seed))
    # before training (-1: nothing logged, eval.at_start; issue 59), after step 2 of 3 (reviewed, not
    # ended), after the last
    assert sorted({(p.done, p.evaluating_after) for p in seen}, key=str) == [(0, -1), (1, 1), (2, 2)]


def test_a_cells_time_counts_every_attempt_and_a_spec_error_shows_its_first_problem(repo, tmp_path):
    """Issue 59, item 5: the time column counted the last attempt only; a spec error read "1 problem in
    the spec" without the problem; the evaluation before training showed as a bare "running 0/3"."""
    from pats.sweep.record import pending_after, running_here

    folder = tmp_path / "sw"
    folder.mkdir()
    here, pid = socket.gethostname(), os.getpid()
    write_manifest(folder, "sw", [_cell(n, n) for n in ("again", "spec", "first", "many")], ())
    first = CellStatus(status="interrupted", started=T0 - 1000, ended=T0 - 880, attempts=1)
    second = running_here(pending_after(first)).model_copy(update={"started": T0, "ended": None})
    assert (second.attempts, second.earlier_s) == (2, 120.0)
    write_status(folder / "again", second.model_copy(update={"status": "finished", "ended": T0 + 60}))
    error = "x.yaml: 1 problem in the spec\n  trainer.lr: must be > 0 [override 'trainer.lr=-1']"
    write_status(folder / "spec", CellStatus(status="failed", started=T0, ended=T0 + 2, error=error))
    _run(repo, folder / "first", 0)  # its events file written (the model loaded), nothing logged yet
    write_status(folder / "first", CellStatus(status="running", started=T0, ended=T0 + 5, host=here, pid=pid,
                                              attempts=1))  # fmt: skip
    many = "x.yaml: 3 problems in the spec\n  a: one\n  b: two\n  c: three"
    write_status(folder / "many", CellStatus(status="failed", started=T0, ended=T0 + 1, error=many))
    assert status_table(folder).splitlines()[1:] == [
        "cell   status    steps  started              time                note",
        f"again  finished  -      {STAMP}  3m00s (2 attempts)",
        f"spec   failed    -      {STAMP}  2s                  x.yaml: 1 problem in the spec: trainer.lr: must be > 0 "
        f"[override 'trainer.lr=-1']; log: {folder / 'spec' / LOG}",
        f"first  running   0/3    {STAMP}  5s                  on {here}, pid {pid}; in its evaluation before training",
        f"many   failed    -      {STAMP}  1s                  x.yaml: 3 problems in the spec: a: one (and 2 more); "
        f"log: {folder / 'many' / LOG}",
    ]  # fmt: skip
    assert status_table(folder).splitlines()[0] == f"sweep {folder}: 4 cells, 1 finished, 2 failed, 1 running"


def test_one_cell_is_one_cell(tmp_path):
    folder = tmp_path / "sw"
    folder.mkdir()
    write_manifest(folder, "sw", [_cell("a", "a")], ())
    (folder / "a").mkdir()
    assert status_table(folder).splitlines()[0] == f"sweep {folder}: 1 cell, 1 pending"


@pytest.mark.parametrize("command", [["sweep", "status", "SWEEP"], ["sweep", "QUICKSTART", "--dry-run"],
                                     ["show", "QUICKSTART"]], ids=["status", "dry-run", "show"])  # fmt: skip
def test_a_table_cut_short_by_its_reader_ends_quietly(command, repo, tmp_path):
    """Issue 59, item 5: `pats sweep status SWEEP | head` ended in a BrokenPipeError traceback. Every
    command goes through main(): with its reader gone it stops quietly, as SIGPIPE would stop it."""
    folder = tmp_path / "sw"
    folder.mkdir()
    write_manifest(folder, "sw", [_cell("a", "a")], ())
    (folder / "a").mkdir()
    argv = [str(folder) if a == "SWEEP" else str(repo / "experiments/quickstart.yaml") if a == "QUICKSTART"
            else a for a in command]  # fmt: skip
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from pats.cli.main import main; sys.exit(main(sys.argv[1:]))",
             *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_an_errors_headline_is_its_first_line_or_a_spec_errors_first_problem():
    from pats.sweep.words import headline

    assert headline("") == headline("\n  \n") == ""
    assert headline("boom\nmore") == "boom"
    assert headline("x.yaml: 1 problem in the spec") == "x.yaml: 1 problem in the spec"  # none listed
    assert (
        headline("2 problems in the spec\n  a: one\n  b: two")
        == "2 problems in the spec: a: one (and 1 more)"
    )
    assert headline("1 problem in the spec\n\n  a: one") == "1 problem in the spec: a: one"
