"""Each cell's record (issue 49, item 3): its output in CELL/log.txt while the terminal still shows it,
its status, times and error in CELL/status.json, a failure's traceback in CELL/traceback.txt and its log,
and `pats sweep status SWEEP` as a table whose failed line names the log. Scripted cells (pats.testing.sweep)."""

from __future__ import annotations

import json
from pathlib import Path

from pats.cli.main import main
from pats.sweep import SweepSpec, run_sweep
from pats.sweep.logs import tee_output
from pats.testing.sweep import scripted_trainers

TINY = ("trainer.steps=3", "trainer.tasks_per_step=2", "eval.every=3", "eval.gap_tasks=0",
        "logging.wandb=disabled", "logging.progress=false")  # fmt: skip


def out_of_memory() -> None:
    raise RuntimeError("out of memory (scripted)")


def test_a_failing_cell_leaves_its_traceback_in_its_log_and_the_status_shows_it(repo, tmp_path, capfd):
    (local,) = scripted_trainers().values()

    def fails_on_grpo(spec, run_dir, state):
        if spec.name == "quickstart-grpo-s0":
            print("loading the model of quickstart-grpo-s0", flush=True)
            out_of_memory()
        return local(spec, run_dir, state)

    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    sweep = SweepSpec(name="tiny", specs=specs, seeds=(0,), overrides=TINY, root=str(tmp_path))
    results = run_sweep(sweep, say=lambda line: None, trainers={"local": fails_on_grpo})
    assert [r.status for r in results] == ["ran", "failed"]

    failed, good = tmp_path / "tiny" / "quickstart-grpo-s0", tmp_path / "tiny" / "quickstart-s0"
    log = (failed / "log.txt").read_text()
    assert log.startswith("--- pats sweep: starting quickstart-grpo-s0 at ")
    assert "Traceback (most recent call last):" in log and "in out_of_memory" in log
    # stdout and stderr reach the log through a pipe each, so the printed line may land before the
    # traceback or after it (seen after it under load); each stream keeps its own order
    printed = "loading the model of quickstart-grpo-s0"
    lines = log.splitlines()
    assert lines.count(printed) == 1
    assert [line for line in lines if line != printed][-1] == "RuntimeError: out of memory (scripted)"
    assert (failed / "traceback.txt").read_text().strip() in log
    shown = capfd.readouterr()
    assert "loading the model of quickstart-grpo-s0" in shown.out  # tee'd: the terminal saw it too
    assert "RuntimeError: out of memory (scripted)" in shown.err
    assert "scripted training of quickstart-s0" in (good / "log.txt").read_text()

    record = json.loads((failed / "status.json").read_text())
    assert (record["status"], record["error"], record["traceback"]) == (
        "failed", "RuntimeError: out of memory (scripted)", "traceback.txt"
    )  # fmt: skip
    assert record["started"] <= record["ended"]
    ok = json.loads((good / "status.json").read_text())
    assert (ok["status"], ok["how"]) == ("finished", "ran") and ok["started"] <= ok["ended"]
    assert not (good / "traceback.txt").exists()

    assert main(["sweep", "status", str(tmp_path / "tiny")]) == 0
    table = capfd.readouterr().out.splitlines()
    assert table[0] == f"sweep {tmp_path / 'tiny'}: 2 cells, 1 finished, 1 failed"
    assert table[1].split() == ["cell", "status", "steps", "started", "time", "note"]
    assert table[2].split()[:3] == ["quickstart-s0", "finished", "3/3"]
    assert table[3].split()[:3] == ["quickstart-grpo-s0", "failed", "-"]
    assert table[3].endswith(f"RuntimeError: out of memory (scripted); log: {failed / 'log.txt'}")


def test_a_rerun_appends_to_the_log_and_a_success_clears_the_failure(repo, tmp_path):
    (local,) = scripted_trainers().values()
    calls = []

    def fails_once(spec, run_dir, state):
        calls.append(spec.name)
        if len(calls) == 1:
            out_of_memory()
        return local(spec, run_dir, state)

    sweep = SweepSpec(name="one", specs=(str(repo / "experiments/quickstart.yaml"),), overrides=TINY,
                      root=str(tmp_path))  # fmt: skip
    assert [r.status for r in run_sweep(sweep, say=lambda line: None, trainers={"local": fails_once})] == [
        "failed"
    ]
    assert [r.status for r in run_sweep(sweep, say=lambda line: None, trainers={"local": fails_once})] == [
        "ran"
    ]
    cell = tmp_path / "one" / "quickstart-s0"
    log = (cell / "log.txt").read_text()
    assert log.count("--- pats sweep: starting quickstart-s0") == 2 and "RuntimeError" in log
    assert json.loads((cell / "status.json").read_text())["error"] == ""
    assert not (cell / "traceback.txt").exists()


def test_the_log_holds_what_child_processes_print_and_the_terminal_gets_the_prefix(tmp_path, capfd):
    import subprocess
    import sys

    log = tmp_path / "log.txt"
    with tee_output(log, prefix="[cell-a] ", header="--- header\n"):
        print("from python", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; print('from a child'); sys.stderr.write('to stderr\\n')"],
                       check=True)  # fmt: skip
    lines = log.read_text().splitlines()
    # The child's stdout and stderr reach the log through two pipes: their order is the race's.
    assert lines[:2] == ["--- header", "from python"]
    assert sorted(lines[2:]) == ["from a child", "to stderr"]
    shown = capfd.readouterr()
    assert shown.out == "[cell-a] from python\n[cell-a] from a child\n"
    assert shown.err == "[cell-a] to stderr\n"
    print("after")  # the descriptors are back
    assert capfd.readouterr().out == "after\n" and log.read_text().count("after") == 0
    assert Path(log).stat().st_size > 0
