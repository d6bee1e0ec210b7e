"""One cell run to its end (pats/sweep/cell.py, issue 49, item 8), from its mutation run: what `run_cell`
returns for a finished, refused, started, resumed, failed and interrupted cell (status and seconds
exactly), its log's header line whole, a failure's error (a pats error's message alone, another's type
and message, cut at 2000 characters) in status.json and the result, what a cell that starts over clears,
the default trainers and prefix, `stamp` and the line `pats sweep` prints for each outcome.
Scripted cells (pats.testing.sweep): milliseconds each."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
from datetime import datetime

import pytest

from pats.errors import PatsError, RunInterrupted
from pats.sweep import SweepSpec, cells, run_cell
from pats.sweep.cell import CellResult, _clear, line, ray_task, stamp
from pats.sweep.checks import check_cell
from pats.testing.sweep import scripted_trainers

TINY = ("trainer.steps=2", "trainer.checkpoint_every=1", "eval.every=2", "eval.gap_tasks=0",
        "logging.wandb=disabled", "logging.progress=false")  # fmt: skip


@pytest.fixture(autouse=True)
def no_real_training(monkeypatch):
    """pats' own trainers load a model: a cell given its trainers never reaches them (were it to, it fails
    at once instead of loading one)."""

    def real(spec, run_dir, state):
        raise AssertionError("pats' own trainers were called")

    monkeypatch.setattr("pats.engine.run.TRAINERS", {"local": real})


def one_cell(repo, tmp_path, *more: str):
    sweep = SweepSpec(name="one", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0,),
                      root=str(tmp_path), overrides=TINY + more)  # fmt: skip
    (cell,) = cells(sweep)
    return cell


def status_of(cell) -> dict:
    return json.loads((cell.run_dir / "status.json").read_text())


def raising(err: BaseException):
    def trainer(spec, run_dir, state):
        print(f"loading {spec.name}", flush=True)
        raise err

    return {"local": trainer}


def header(how: str, cell, record: dict) -> str:
    when = datetime.fromtimestamp(record["started"]).strftime("%Y-%m-%d %H:%M:%S")
    return f"--- pats sweep: {how} {cell.name} at {when} on {socket.gethostname()} (pid {os.getpid()})\n"


def test_a_cell_that_ran_is_timed_and_its_log_starts_with_the_header_then_it_is_skipped(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    result = run_cell(cell, scripted_trainers())
    record = status_of(cell)
    assert (record["status"], record["how"], record["host"], record["pid"]) == (
        "finished", "ran", socket.gethostname(), os.getpid()
    )  # fmt: skip
    assert result == CellResult(cell.name, "ran", record["ended"] - record["started"])
    assert result.error == "" and 0 < result.seconds < 60
    log = (cell.run_dir / "log.txt").read_text()
    assert log.splitlines(keepends=True)[0] == header("starting", cell, record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "failed"  # type: ignore[misc]

    again = run_cell(cell, scripted_trainers())
    assert again == CellResult(cell.name, "skipped", 0.0)
    assert (again.status, again.seconds, again.error) == ("skipped", 0.0, "")
    assert (cell.run_dir / "log.txt").read_text() == log  # a skipped cell writes nothing


def test_a_cell_whose_folder_holds_another_spec_is_refused_and_left_alone(repo, tmp_path):
    assert run_cell(one_cell(repo, tmp_path), scripted_trainers()).status == "ran"
    other = one_cell(repo, tmp_path, "trainer.steps=3")
    before = {p: p.stat().st_mtime_ns for p in other.run_dir.rglob("*")}
    check, why = check_cell(other)
    assert check == "refused" and why
    result = run_cell(other, scripted_trainers())
    assert result == CellResult(other.name, "refused", 0.0, why)
    assert (result.status, result.seconds, result.error) == ("refused", 0.0, why)
    assert {p: p.stat().st_mtime_ns for p in other.run_dir.rglob("*")} == before


def test_a_cell_that_checkpointed_resumes_and_its_log_says_so(repo, tmp_path):
    cell = one_cell(repo, tmp_path, "trainer.steps=3", "eval.every=3")
    from pats.engine.run import run_spec

    run_dir = run_spec(cell.spec, scripted_trainers())
    (run_dir / "checkpoints" / "latest.json").write_text(
        (run_dir / "checkpoints" / "step_000001" / "state.json").read_text()
    )  # the last step's checkpoint never reached latest.json: it resumes from step 1
    result = run_cell(cell, scripted_trainers())
    record = status_of(cell)
    assert (record["status"], record["how"]) == ("finished", "resumed")
    assert result == CellResult(cell.name, "resumed", record["ended"] - record["started"])
    log = (run_dir / "log.txt").read_text()
    assert log.splitlines(keepends=True)[0] == header("resuming", cell, record)


def test_a_cell_moved_with_its_sweep_resumes_from_the_paths_where_it_is_now(repo, tmp_path):
    """A checkout cloned or moved elsewhere with a checkpointed cell: its spec.yaml names the old
    absolute paths (the warm start's adapter beside the sweep); the cell resumes, not refused, and its
    trainer reads the adapter where it is now, the old folder gone."""
    adapter = ("policy.lora.rank=8", "trainer.steps=3", "eval.every=3")
    old = one_cell(repo, tmp_path / "a", *adapter, f"policy.init_adapter={tmp_path / 'a' / 'adapter'}")
    from pats.engine.run import run_spec

    (tmp_path / "a" / "adapter").mkdir(parents=True)  # (the scripted policy does not read it)
    run_dir = run_spec(old.spec, scripted_trainers())
    (run_dir / "checkpoints" / "latest.json").write_text(
        (run_dir / "checkpoints" / "step_000001" / "state.json").read_text()
    )
    shutil.move(tmp_path / "a", tmp_path / "b")
    cell = one_cell(repo, tmp_path / "b", *adapter, f"policy.init_adapter={tmp_path / 'b' / 'adapter'}")
    assert check_cell(cell) == ("resume", "")
    seen = []

    def trainer(spec, run_dir, state):
        seen.append((spec.policy.init_adapter, spec.logging.root, state.step))
        return scripted_trainers()["local"](spec, run_dir, state)

    assert run_cell(cell, {"local": trainer}).status == "resumed"
    assert seen == [(str(tmp_path / "b" / "adapter"), str(tmp_path / "b" / "one"), 1)]


def test_a_stopped_cell_is_recorded_interrupted_and_the_stop_goes_on(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_cell(cell, raising(KeyboardInterrupt()))
    record = status_of(cell)
    assert record["status"] == "interrupted"
    assert record["ended"] is not None and record["started"] <= record["ended"]
    assert (cell.run_dir / "log.txt").read_text().startswith(header("starting", cell, record))


def test_as_a_ray_task_a_cell_takes_sigterm_as_a_stop_and_gives_the_handler_back(repo, tmp_path, monkeypatch):
    """ray_task (issue 59, item 2): in the driver's working directory where the node has it, SIGTERM
    raises KeyboardInterrupt while the cell runs (a stop outside its training steps), which reaches the
    sweep as RunInterrupted with the cell recorded interrupted, and the handler before it is put back.
    The handler is called, not the signal sent: a mutant that left SIGTERM's default would end pytest."""
    cell = one_cell(repo, tmp_path)
    seen = []

    def stopped(spec, run_dir, state):
        seen.append(os.getcwd())
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler), handler  # SIG_DFL: the cell fails
        handler(signal.SIGTERM, None)

    def mine(signum, frame):
        raise AssertionError("not this handler while the cell runs")

    monkeypatch.chdir(repo)
    before = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(RunInterrupted) as stop:
            ray_task(cell, {"local": stopped}, str(tmp_path))
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    assert (str(stop.value), stop.value.signum) == (
        "stopped at your request outside its training steps; its last checkpoint is kept", signal.SIGTERM
    )  # fmt: skip
    assert seen == [str(tmp_path)] and status_of(cell)["status"] == "interrupted"

    again = one_cell(repo, tmp_path / "elsewhere")  # a directory this node lacks: it stays where it is
    assert ray_task(again, scripted_trainers(), str(tmp_path / "not-here")).status == "ran"
    assert os.getcwd() == str(tmp_path) and signal.getsignal(signal.SIGTERM) is before


def test_a_pats_error_fails_the_cell_with_its_message_alone(repo, tmp_path, capfd):
    cell = one_cell(repo, tmp_path)
    message = "the data set is missing\nrun pats data fetch first"
    result = run_cell(cell, raising(PatsError(message)))
    record = status_of(cell)
    assert (record["status"], record["error"], record["traceback"]) == ("failed", message, "traceback.txt")
    assert result == CellResult(cell.name, "failed", record["ended"] - record["started"], message)
    assert 0 < result.seconds < 60
    err = capfd.readouterr().err.splitlines()
    assert err[-2:] == ["error: the data set is missing", "run pats data fetch first"]
    assert not any("Traceback" in e for e in err)  # it is in traceback.txt and the log
    # the trainer's printed line (stdout) may land before the error (stderr) or after it: a pipe each
    log = (cell.run_dir / "log.txt").read_text()
    assert log.count("loading quickstart-s0\n") == 1
    assert log.replace("loading quickstart-s0\n", "").endswith(f"error: {message}\n")


def test_another_error_is_recorded_with_its_type_and_cut_at_2000_characters(repo, tmp_path, capfd):
    cell = one_cell(repo, tmp_path)
    result = run_cell(cell, raising(RuntimeError("x" * 3000)))
    error = ("RuntimeError: " + "x" * 3000)[:2000]
    record = status_of(cell)
    assert (record["status"], record["error"]) == ("failed", error) and len(error) == 2000
    assert result == CellResult(cell.name, "failed", record["ended"] - record["started"], error)
    assert "Traceback (most recent call last):" in capfd.readouterr().err


def test_without_trainers_or_prefix_a_cell_trains_with_pats_own_and_prints_its_lines_as_they_are(
    repo, tmp_path, monkeypatch, capfd
):
    monkeypatch.setattr("pats.engine.run.TRAINERS", scripted_trainers())
    cell = one_cell(repo, tmp_path)
    assert run_cell(cell).status == "ran"
    out = capfd.readouterr().out
    assert f"scripted training of {cell.name} " in out
    assert f"\nscripted training of {cell.name} " in "\n" + out  # at a line's start: no prefix


def test_a_prefix_goes_before_each_line_on_the_terminal(repo, tmp_path, capfd):
    cell = one_cell(repo, tmp_path)
    assert run_cell(cell, scripted_trainers(), prefix="[c] ").status == "ran"
    assert f"\n[c] scripted training of {cell.name} " in "\n" + capfd.readouterr().out


def test_a_cell_starting_over_keeps_its_sweep_files_and_clears_the_rest(tmp_path):
    run_dir, outside = tmp_path / "cell", tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("not the cell's")
    run_dir.mkdir()
    for name in ("status.json", "log.txt", "traceback.txt"):
        (run_dir / name).write_text(name)
    for i in range(20):
        (run_dir / f"file{i}.txt").write_text("old")
    (run_dir / "checkpoints" / "step_000000").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_000000" / "state.json").write_text("{}")
    (run_dir / "linked").symlink_to(outside, target_is_directory=True)
    (run_dir / "dangling").symlink_to(tmp_path / "nowhere")
    _clear(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["log.txt", "status.json", "traceback.txt"]
    assert all((run_dir / n).read_text() == n for n in ("status.json", "log.txt", "traceback.txt"))
    assert (outside / "kept.txt").read_text() == "not the cell's"  # the link went, not what it names

    _clear(tmp_path / "never")  # a cell that never ran has no folder yet: nothing to do
    assert not (tmp_path / "never").exists()


def test_stamp():
    assert stamp(None) == "-"
    when = 1_700_000_000.75
    assert stamp(when) == datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S")
    assert stamp(0.0) == datetime.fromtimestamp(0.0).strftime("%Y-%m-%d %H:%M:%S")


def test_the_line_printed_for_each_outcome(repo, tmp_path):
    cell = one_cell(repo, tmp_path)
    name, run_dir, log = cell.name, cell.run_dir, cell.run_dir / "log.txt"
    cases = [
        (CellResult(name, "ran", 12.4), f"ran in 12 s ({run_dir})"),
        (CellResult(name, "resumed", 6.6), f"resumed and finished in 7 s ({run_dir})"),
        (CellResult(name, "skipped", 0.0), f"already finished, skipped ({run_dir})"),
        (CellResult(name, "refused", 0.0, "holds another run\nremove it"), f"REFUSED: holds another run ({run_dir})"),
        (CellResult(name, "refused", 0.0), f"REFUSED:  ({run_dir})"),
        (CellResult(name, "failed", 3.2, "RuntimeError: boom\nmore"), f"FAILED after 3 s: RuntimeError: boom (log: {log})"),
        (CellResult(name, "failed", 1.0), f"FAILED after 1 s:  (log: {log})"),
    ]  # fmt: skip
    for result, what in cases:
        assert line(2, 5, cell, result) == f"cell 2/5 {name}: {what}"


def test_a_new_cell_is_announced_starting_and_a_checkpointed_one_resuming_from_its_next_step(repo, tmp_path):
    """`starting`, what `pats sweep` prints as a cell starts (issue 59, item 5; found by mutation)."""
    from pats.engine.run import run_spec
    from pats.sweep.cell import starting

    cell = one_cell(repo, tmp_path, "trainer.steps=3", "eval.every=3")
    assert starting(cell) == "starting"
    run_dir = run_spec(cell.spec, scripted_trainers())
    (run_dir / "checkpoints" / "latest.json").write_text(
        (run_dir / "checkpoints" / "step_000001" / "state.json").read_text()
    )  # as in the resume test: the run stopped after step 1's checkpoint
    assert starting(cell) == "resuming from step 2"
