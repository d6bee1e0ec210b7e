"""`pats sweep`: the grid's cells and names, a sweep killed mid-cell that resumes and skips finished
cells, a failed cell that does not stop the others, and the same sweep as Ray tasks on a local Ray.
Cells train through pats' own run_spec/resume/train with FakeEnv and a scripted policy
(pats.testing.sweep), so a cell takes well under a second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pats.errors import SpecError
from pats.logging.events import StepEndEvent, read_events
from pats.sweep import SweepSpec, cells, parse_seeds, run_sweep, sweep_name
from pats.sweep.status import status_rows
from pats.testing.sweep import scripted_trainers

TINY = (
    "trainer.steps=3",
    "trainer.tasks_per_step=2",
    "eval.every=3",
    "eval.gap_tasks=0",
    "logging.wandb=disabled",
    "logging.progress=false",
)


def two_by_two(repo: Path, root: Path, **extra) -> SweepSpec:
    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    return SweepSpec(name="tiny", specs=specs, seeds=(0, 1), overrides=TINY, root=str(root), **extra)


def step_ends(run_dir: Path) -> list[int]:
    return [e.step for e in read_events(run_dir / "events.jsonl", StepEndEvent)]


def test_cells_are_specs_by_grid_by_seed_with_the_sweeps_names(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path, grid={"trainer.lr": ("1e-4", "3e-4")})
    planned = cells(sweep)
    assert [c.name for c in planned] == [
        f"{cond}-lr{lr}-s{seed}"
        for cond in ("quickstart", "quickstart-grpo")
        for lr in ("1e-4", "3e-4")
        for seed in (0, 1)
    ]
    cell = planned[3]  # quickstart, lr 3e-4, seed 1
    assert (cell.condition, cell.seed, cell.spec.seed, cell.spec.trainer.lr) == (
        "quickstart-lr3e-4",
        1,
        1,
        3e-4,
    )
    assert cell.spec.logging.group == "tiny"  # one W&B group per sweep
    assert cell.run_dir == (tmp_path / "tiny" / "quickstart-lr3e-4-s1").absolute()
    assert cell.spec.trainer.steps == 3 and planned[4].spec.scaffold.mode == "none"
    assert parse_seeds("0-3") == (0, 1, 2, 3) and parse_seeds("5,0-1,1") == (5, 0, 1)
    with pytest.raises(SpecError, match="write seeds as 0-3"):
        parse_seeds("3-1")
    # the same grid gives the same derived name; another one another name
    unnamed = sweep.model_copy(update={"name": ""})
    assert (
        sweep_name(unnamed)
        == sweep_name(unnamed.model_copy())
        != sweep_name(unnamed.model_copy(update={"seeds": (0,)}))
    )


def test_every_problem_of_every_cell_is_reported_before_anything_runs(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path).model_copy(update={"overrides": (*TINY, "seed=4", "trainer.stepz=2")})
    with pytest.raises(SpecError) as err:
        run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())
    text = str(err.value)
    assert "seed: is set per cell by the sweep; use --seeds" in text
    assert "trainer.stepz: unknown key 'stepz'; did you mean 'steps'?" in text
    assert not (tmp_path / "tiny").exists()  # nothing written


def test_a_killed_sweep_resumes_its_cell_and_skips_the_finished_one(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path)
    script = (
        "import sys; from pats.sweep import SweepSpec, run_sweep; "
        "from pats.testing.sweep import scripted_trainers; "
        "run_sweep(SweepSpec.model_validate_json(sys.argv[1]), trainers=scripted_trainers(step_s=0.4))"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, sweep.model_dump_json()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    second = tmp_path / "tiny" / "quickstart-s1"
    try:
        deadline = time.monotonic() + 120
        while not (second / "checkpoints" / "latest.json").is_file():  # the 2nd cell checkpointed a step
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stdout.read() if proc.stdout else ""
            )
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # mid-cell, as a crash or a lost node would
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "cell 1/4 quickstart-s0: ran" in out and "cell 2/4" in out and "cell 3/4" not in out
    assert step_ends(tmp_path / "tiny" / "quickstart-s0") == [0, 1, 2]
    assert step_ends(second) != [0, 1, 2]  # killed before it ended
    # its record still says running, but its process is gone; the cells after it were never started
    assert [(r.cell, r.status) for r in status_rows(tmp_path / "tiny")] == [
        ("quickstart-s0", "finished"), ("quickstart-s1", "interrupted"),
        ("quickstart-grpo-s0", "pending"), ("quickstart-grpo-s1", "pending"),
    ]  # fmt: skip

    lines: list[str] = []
    results = run_sweep(sweep, say=lines.append, trainers=scripted_trainers())
    assert [(r.name, r.status) for r in results] == [
        ("quickstart-s0", "skipped"),
        ("quickstart-s1", "resumed"),
        ("quickstart-grpo-s0", "ran"),
        ("quickstart-grpo-s1", "ran"),
    ]
    assert step_ends(second) == [0, 1, 2]  # every step once: the resume cut the log back to its checkpoint
    assert "cell 1/4 quickstart-s0: already finished, skipped" in "\n".join(lines)
    manifest = json.loads((tmp_path / "tiny" / "sweep.json").read_text())
    assert [(c["condition"], c["seed"]) for c in manifest["cells"]] == [
        ("quickstart", 0), ("quickstart", 1), ("quickstart-grpo", 0), ("quickstart-grpo", 1)
    ]  # fmt: skip
    again = run_sweep(sweep, say=lines.append, trainers=scripted_trainers())
    assert {r.status for r in again} == {"skipped"}


def test_a_failed_cell_is_reported_and_the_others_go_on(repo, tmp_path):
    (local,) = scripted_trainers().values()

    def fails_on_grpo_seed_0(spec, run_dir, state):
        if spec.name == "quickstart-grpo-s0":
            raise RuntimeError("out of memory (scripted)")
        return local(spec, run_dir, state)

    lines: list[str] = []
    results = run_sweep(
        two_by_two(repo, tmp_path), say=lines.append, trainers={"local": fails_on_grpo_seed_0}
    )
    assert [r.status for r in results] == ["ran", "ran", "failed", "ran"]
    assert results[2].error == "RuntimeError: out of memory (scripted)"
    failed = tmp_path / "tiny" / "quickstart-grpo-s0"
    (said,) = [line for line in lines if line.startswith("cell 3/4 quickstart-grpo-s0: FAILED after ")]
    assert said.endswith(f" s: RuntimeError: out of memory (scripted) (log: {failed / 'log.txt'})")
    assert "3 ran, 1 failed" in lines[-1]
    # the failed cell left nothing to resume (no step ended), so the next run starts it afresh; its
    # folder keeps only the sweep's record of it
    assert sorted(p.name for p in failed.iterdir()) == ["log.txt", "status.json", "traceback.txt"]


def test_a_cell_whose_folder_holds_another_spec_is_refused_not_overwritten(repo, tmp_path):
    sweep = two_by_two(repo, tmp_path).model_copy(update={"seeds": (0,)})
    run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())
    changed = sweep.model_copy(
        update={"overrides": (*TINY[:-1], "logging.progress=false", "trainer.steps=4")}
    )
    manifest = (tmp_path / "tiny" / "sweep.json").read_text()
    written = (tmp_path / "tiny" / "sweep.json").stat()
    results = run_sweep(changed, say=lambda line: None, trainers=scripted_trainers())
    assert [r.status for r in results] == ["refused", "refused"]
    assert "holds a run of another spec than this cell's (trainer.steps: 3 there, 4 here" in results[0].error
    assert "another --name" in results[0].error
    assert step_ends(tmp_path / "tiny" / "quickstart-s0") == [0, 1, 2]  # untouched
    assert (tmp_path / "tiny" / "sweep.json").read_text() == manifest  # still describes what is there
    again = (tmp_path / "tiny" / "sweep.json").stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # not rewritten


def test_a_finished_sweep_rerun_with_an_added_override_is_refused_not_skipped(repo, tmp_path):
    """Issue 59, item 1: the spec is compared before "finished" is looked at. A finished sweep rerun with
    trainer.lr added was "already finished, skipped" and its sweep.json then listed an lr none of its
    cells trained with."""
    sweep = two_by_two(repo, tmp_path).model_copy(update={"seeds": (0,)})
    run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())
    manifest = (tmp_path / "tiny" / "sweep.json").read_text()
    changed = sweep.model_copy(update={"overrides": (*TINY, "trainer.lr=3e-4")})
    lines: list[str] = []
    results = run_sweep(changed, say=lines.append, trainers=scripted_trainers())
    assert [r.status for r in results] == ["refused", "refused"]
    lr = cells(sweep)[0].spec.trainer.lr
    assert f"(trainer.lr: {lr} there, 0.0003 here: the sweep's specs or overrides changed); undo that " \
        "change to go on with this sweep, or give the sweep another --name to run the changed cells " \
        "beside it (or remove that folder to rerun the cell)" in results[0].error  # fmt: skip
    assert any(line.startswith("cell 1/2 quickstart-s0: REFUSED: ") for line in lines)
    assert (tmp_path / "tiny" / "sweep.json").read_text() == manifest  # no trainer.lr=3e-4 in it
    assert step_ends(tmp_path / "tiny" / "quickstart-s0") == [0, 1, 2]  # untouched


def test_the_cli_plans_from_a_sweep_file_and_the_command_line(repo, tmp_path, capsys):
    from pats.cli.main import main

    sweep_file = tmp_path / "ablations.yaml"
    sweep_file.write_text(
        "sweep:\n"
        f"  specs: [{repo}/experiments/quickstart.yaml]\n"
        "  seeds: [0, 1, 2]\n"
        "  overrides: [trainer.steps=2]\n"
        "  grid: {scaffold.removal: ['true', 'false']}\n"
    )
    extra = str(repo / "experiments/baselines/grpo.yaml")
    assert main(["sweep", str(sweep_file), extra, "--seeds", "0-1", "eval.every=2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sweep ablations: 8 cells")  # (quickstart, grpo) x 2 grid values x 2 seeds
    assert "quickstart-removalfalse-s1:" in out and "quickstart-grpo-removaltrue-s0:" in out
    assert "trainer.steps=2 eval.every=2 scaffold.removal=false seed=1" in out


def test_one_cell_is_counted_as_one(repo, tmp_path, capsys):
    """Issue 59, item 5: '1 cells', '1 conditions x 1 seeds'."""
    from pats.cli.main import main

    quickstart = str(repo / "experiments/quickstart.yaml")
    assert main(["sweep", quickstart, "--name", "one", "--root", str(tmp_path), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("sweep one: 1 cell\n")
    sweep_file = tmp_path / "one.yaml"
    sweep_file.write_text(f"sweep:\n  specs: [{quickstart}]\n")
    assert main(["validate", str(sweep_file)]) == 0
    assert capsys.readouterr().out == f"ok: {sweep_file} (sweep: 1 cell, 1 condition)\n"
    lines: list[str] = []
    sweep = SweepSpec(name="one", specs=(quickstart,), overrides=TINY, root=str(tmp_path))
    run_sweep(sweep, say=lines.append, trainers=scripted_trainers())
    assert lines[0] == f"sweep one: 1 cell (1 condition x 1 seed) in {tmp_path / 'one'}"


@pytest.mark.slow
def test_the_sweep_as_ray_tasks_on_a_local_ray(repo, tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, object_store_memory=80 * 1024**2, include_dashboard=False, log_to_driver=False)
    try:
        lines: list[str] = []
        sweep = two_by_two(repo, tmp_path, cpus=1)
        results = run_sweep(sweep, ray_address="auto", say=lines.append, trainers=scripted_trainers())
        assert [(r.name, r.status) for r in results] == [
            ("quickstart-s0", "ran"), ("quickstart-s1", "ran"), ("quickstart-grpo-s0", "ran"), ("quickstart-grpo-s1", "ran")
        ]  # fmt: skip
        assert "submitted 4 cells as Ray tasks (1 CPU, 0 GPU each)" in lines
        for cell in cells(sweep):
            assert step_ends(cell.run_dir) == [0, 1, 2]
        again = run_sweep(sweep, ray_address="auto", say=lines.append, trainers=scripted_trainers())
        assert {r.status for r in again} == {"skipped"}
    finally:
        ray.shutdown()


SWEEP_FILES = sorted((Path(__file__).resolve().parents[1] / "experiments" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.name)
def test_shipped_sweep_files_plan_and_validate_and_open_with_their_command(path, repo, monkeypatch, capsys):
    from pats.cli.main import main
    from pats.sweep import load_sweep_file

    monkeypatch.chdir(repo)
    assert path.read_text().splitlines()[0] == f"# Run: pats sweep {path.relative_to(repo)}"
    planned = cells(load_sweep_file(path))
    # root: is relative to the file: the cells land in the repository's runs/ or bench/results/, never
    # under experiments/sweeps/
    assert planned[0].run_dir.parent.parent.relative_to(repo).parts[0] in ("runs", "bench")
    assert len(planned) == len({c.name for c in planned}) > 1
    assert main(["validate", str(path.relative_to(repo))]) == 0
    assert f"sweep: {len(planned)} cells" in capsys.readouterr().out
