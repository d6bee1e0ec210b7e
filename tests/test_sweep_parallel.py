"""Cells in parallel on a local Ray started by the sweep (issue 49, item 4): `--parallel 2` runs two
cells at once (their times overlap in their status records), each with trainer.threads = its CPUs,
each line it prints reaching this terminal under its own name (Ray's de-duplication off), a cell whose
worker dies failed and timed from its own start; Ray stopped at the end. Scripted cells
(pats.testing.sweep): a real Ray, real worker processes, a real process death."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from pats.errors import PrerequisiteError, RunInterrupted
from pats.sweep import SweepSpec, run_sweep
from pats.testing.sweep import scripted_trainers

TINY = ("trainer.steps=3", "trainer.tasks_per_step=2", "eval.every=3", "eval.gap_tasks=0",
        "logging.wandb=disabled", "logging.progress=false")  # fmt: skip


def four_cells(repo, root) -> SweepSpec:
    """quickstart and grpo, seeds 0 and 1."""
    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    return SweepSpec(name="par", specs=specs, seeds=(0, 1), overrides=TINY, root=str(root))


@pytest.mark.slow
def test_parallel_2_runs_two_cells_at_once_on_a_local_ray(repo, tmp_path, capfd):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    lines: list[str] = []
    dies = "quickstart-grpo-s1"  # its worker process ends at its first update, as an OOM kill would
    results = run_sweep(four_cells(repo, tmp_path), "local", lines.append,
                        scripted_trainers(step_s=1.0, dies=dies), parallel=2)  # fmt: skip
    assert not ray.is_initialized()  # the sweep's Ray is stopped
    assert [(r.name, r.status) for r in results] == [
        ("quickstart-s0", "ran"), ("quickstart-s1", "ran"), ("quickstart-grpo-s0", "ran"), (dies, "failed")
    ]  # fmt: skip
    assert any(
        line.startswith("submitted 4 cells as Ray tasks on a local Ray instance (1 CPU, 0 GPU, ")
        for line in lines
    )

    folder = tmp_path / "par"
    records = {r.name: json.loads((folder / r.name / "status.json").read_text()) for r in results}
    first, second = records["quickstart-s0"], records["quickstart-s1"]
    assert max(first["started"], second["started"]) < min(first["ended"], second["ended"])  # at once
    assert first["pid"] != second["pid"]  # in two worker processes
    # trainer.threads: the CPUs a cell asks for (the spec leaves it unset)
    assert "threads: 1\n" in (folder / "quickstart-s0" / "spec.yaml").read_text()

    crashed = records[dies]
    assert crashed["status"] == "failed" and "its Ray worker died" in crashed["error"]
    assert crashed["ended"] - crashed["started"] >= 1.0  # timed from its own start: not "after 0 s"
    (said,) = [line for line in lines if line.startswith(f"cell 4/4 {dies}: FAILED after ")]
    assert not said.startswith(f"cell 4/4 {dies}: FAILED after 0 s")
    assert "--- pats sweep: its Ray worker died" in (folder / dies / "log.txt").read_text()

    # each cell's line reached this terminal under its name; two cells' lines equal but for the name
    # are both there (Ray would have merged them); each ran at the sweep's niceness, not Ray's default
    # of 15 more for its workers (a sweep started with `nice -n 10` had its cells at 19)
    out = capfd.readouterr().out
    started = f"(threads 1, niceness {os.nice(0)})"
    for name in ("quickstart-s0", "quickstart-s1"):
        assert any(f"({name} pid=" in line and f"scripted training of {name} {started}" in line
                   for line in out.splitlines()), out  # fmt: skip
        assert f"scripted training of {name} {started}" in (folder / name / "log.txt").read_text()


def test_without_ray_the_sweep_names_the_extra_and_writes_nothing(repo, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(PrerequisiteError, match=r"needs Ray: `pip install -e '\.\[sweep\]'` in a clone"):
        run_sweep(four_cells(repo, tmp_path), "local", lambda line: None, scripted_trainers(), parallel=2)
    assert not (tmp_path / "par").exists()


def test_parallel_shares_the_machine_and_takes_no_cpus_of_its_own(repo, capsys):
    from pats.cli.main import main
    from pats.host import machine_cpus

    quickstart = str(repo / "experiments/quickstart.yaml")
    assert main(["sweep", quickstart, "--parallel", "2", "--dry-run"]) == 0
    threads = max(1, int(machine_cpus() / 2))
    assert f"trainer.threads={threads} seed=0" in capsys.readouterr().out  # unset in the spec: its share
    assert main(["sweep", quickstart, "trainer.threads=3", "--parallel", "2", "--dry-run"]) == 0
    assert "trainer.threads=3 seed=0" in capsys.readouterr().out  # set: kept
    assert main(["sweep", quickstart, "--parallel", "2", "--cpus", "1", "--dry-run"]) == 2
    assert "give it without --ray ADDRESS, --cpus and --gpus" in capsys.readouterr().err
    assert main(["sweep", quickstart, "--dry-run"]) == 0
    assert "trainer.threads" not in capsys.readouterr().out  # one after another: the spec's own


def test_run_interrupted_survives_pickling_with_its_exit_code():
    """What crosses from a Ray worker to the sweep is pickled; by default an exception is rebuilt from
    its message alone, which RunInterrupted(message, signum) cannot take."""
    stopped = pickle.loads(pickle.dumps(RunInterrupted("stopped after step 1", signal.SIGTERM)))
    assert isinstance(stopped, RunInterrupted)
    assert (str(stopped), stopped.signum, stopped.exit_code) == ("stopped after step 1", signal.SIGTERM, 143)


@pytest.mark.slow
def test_a_cell_stopped_by_a_signal_under_ray_is_interrupted_and_the_sweep_resumes(repo, tmp_path):
    """`kill PID` of one cell's worker: that cell stops after its step (checkpointed) and is recorded
    interrupted, not failed; the sweep starts no further cell, lets the running one end, and exits as
    a stopped run does; a rerun resumes the stopped cell."""
    pytest.importorskip("ray")
    three = SweepSpec(name="stop", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0, 1, 2),
                      overrides=TINY, root=str(tmp_path))  # fmt: skip
    lines: list[str] = []
    with pytest.raises(RunInterrupted) as stopped:
        run_sweep(
            three, "local", lines.append, scripted_trainers(step_s=1.0, stops="quickstart-s0"), parallel=2
        )
    assert stopped.value.exit_code == 128 + signal.SIGTERM

    folder = tmp_path / "stop"
    status = {n: json.loads((folder / n / "status.json").read_text())["status"]
              for n in ("quickstart-s0", "quickstart-s1", "quickstart-s2")}  # fmt: skip
    assert status["quickstart-s0"] == "interrupted"
    assert status["quickstart-s1"] == "finished"  # it was running: it went on to its end
    # s2 was queued: cancelled before it started (pending) or as it started (interrupted), or, if Ray had
    # handed it the freed worker before the stop, run to its end
    assert status["quickstart-s2"] in ("pending", "interrupted", "finished")
    log = (folder / "quickstart-s0" / "log.txt").read_text()
    assert "SIGTERM: stopping after the step in flight" in log and "worker died" not in log
    (said,) = [
        x for x in lines if x.startswith("cell 1/3 quickstart-s0: interrupted: stopped at your request")
    ]

    again: list[str] = []
    results = run_sweep(three, "local", again.append, scripted_trainers(), parallel=2)
    assert {r.name: r.status for r in results}["quickstart-s0"] == "resumed"
    assert {r.status for r in results} <= {"resumed", "skipped", "ran"}
    assert all(json.loads((folder / n / "status.json").read_text())["status"] == "finished" for n in status)


DRIVER = """
import functools, sys
import pats.sweep.run as run
from pats.cli.main import main
from pats.testing.sweep import scripted_trainers
trainers = scripted_trainers(step_s=float(sys.argv[1]), hold=sys.argv[2])
run.run_sweep = functools.partial(run.run_sweep, trainers=trainers)
sys.exit(main(sys.argv[3:]))
"""  # `pats sweep` itself, its cells trained by the scripted trainer (a real one loads a model)


def start_parallel_sweep(repo, tmp_path, step_s: float, hold: str = ""):
    """`pats sweep` of quickstart seeds 0-2 with --parallel 2, in its own process (the driver); with
    `hold`, its cells' updates after the first wait until that file exists."""
    args = ["sweep", str(repo / "experiments/quickstart.yaml"), "--seeds", "0-2", "--parallel", "2",
            "--name", "stop", "--root", str(tmp_path), *TINY]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(step_s), hold, *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until_both_checkpointed(proc, folder) -> None:
    """Until the two running cells each checkpointed step 0 (so each is in a later step's update); a
    driver that ends or takes 180 s fails the test with its output (killed first: its cells may be
    waiting on a hold file, so it would not end by itself)."""
    deadline = time.monotonic() + 180
    while not all(
        (folder / n / "checkpoints" / "latest.json").is_file() for n in ("quickstart-s0", "quickstart-s1")
    ):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate()[0])
        time.sleep(0.1)


def statuses(folder) -> dict[str, str]:
    return {n: json.loads((folder / n / "status.json").read_text())["status"]
            for n in ("quickstart-s0", "quickstart-s1", "quickstart-s2")}  # fmt: skip


@pytest.mark.slow
def test_sigterm_to_a_parallel_sweep_stops_its_cells_after_their_step_and_a_rerun_resumes(repo, tmp_path):
    """Issue 59, item 2: SIGTERM to the sweep's own process (not its cells) under --parallel killed the
    cells mid-step (Ray's handler stopped Ray; exit 1, each cell "interrupted, its process is gone").
    Now the sweep passes it on: each running cell stops after its step, checkpointed, recorded
    interrupted; the queued one stays pending; the exit code and messages are the serial sweep's."""
    pytest.importorskip("ray")
    hold = tmp_path / "go-on"  # the cells' step 1 waits for it: neither can finish before the signal
    proc = start_parallel_sweep(repo, tmp_path, step_s=1.5, hold=str(hold))
    folder = tmp_path / "stop"
    try:
        wait_until_both_checkpointed(proc, folder)
        proc.send_signal(signal.SIGTERM)  # the driver only
        time.sleep(3.0)  # it passes the stop on to both cells, waiting in step 1 meanwhile
        hold.touch()
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert "[sweep] SIGTERM: stopping each running cell after its step in flight (it is checkpointed)" in out
    assert "*** SIGTERM received" not in out and "Traceback" not in out and "worker died" not in out
    for name in ("quickstart-s0", "quickstart-s1"):
        said_lines = [
            x for x in out.splitlines() if f"{name}: interrupted: stopped at your request after step " in x
        ]
        assert len(said_lines) == 1, out
        said = said_lines[0]
        assert said.startswith("[sweep] cell ") and said.endswith(
            f"(checkpointed) (log: {folder / name / 'log.txt'})"
        )
        assert "SIGTERM: stopping after the step in flight" in (folder / name / "log.txt").read_text()
    last = out.rstrip().splitlines()[-1]  # the cells in the order they stopped
    assert last in [
        f"error: the sweep stopped at your request: 2 cells stopped ({names}). Rerun the same `pats sweep` "
        "command to go on: finished cells are skipped, stopped ones resume from their last checkpoint, the "
        f"others start (`pats sweep status {folder}` shows each cell)"
        for names in ("quickstart-s0, quickstart-s1", "quickstart-s1, quickstart-s0")
    ], out
    assert statuses(folder) == {"quickstart-s0": "interrupted", "quickstart-s1": "interrupted",
                                "quickstart-s2": "pending"}  # fmt: skip

    lines: list[str] = []
    three = SweepSpec(name="stop", specs=(str(repo / "experiments/quickstart.yaml"),), seeds=(0, 1, 2),
                      overrides=TINY, root=str(tmp_path))  # fmt: skip
    results = run_sweep(three, "local", lines.append, scripted_trainers(), parallel=2)
    assert [(r.name, r.status) for r in results] == [
        ("quickstart-s0", "resumed"), ("quickstart-s1", "resumed"), ("quickstart-s2", "ran")
    ]  # fmt: skip


@pytest.mark.slow
def test_a_second_sigterm_to_a_parallel_sweep_stops_its_cells_at_once(repo, tmp_path):
    pytest.importorskip("ray")
    # step 1 waits for a file never written: neither cell can finish before the signals, however slowly
    # the machine starts them
    proc = start_parallel_sweep(repo, tmp_path, step_s=4.0, hold=str(tmp_path / "never"))
    folder = tmp_path / "stop"
    try:
        wait_until_both_checkpointed(proc, folder)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        out = proc.communicate(timeout=120)[0]
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert "[sweep] SIGTERM again: stopping the running cells at once (their steps in flight are lost)" in out
    assert "*** SIGTERM received" not in out and "Traceback" not in out
    assert took < 30, out  # not the cells' steps in flight (they wait for ever)
    assert statuses(folder) == {"quickstart-s0": "interrupted", "quickstart-s1": "interrupted",
                                "quickstart-s2": "pending"}  # fmt: skip
    assert (
        out.rstrip()
        .splitlines()[-1]
        .startswith("error: the sweep stopped at your request: 2 cells stopped (")
    )
