"""scripts/verl-smoke started by a Python without pats (its shebang's `python3` outside the environment):
it runs again with the clone's .venv, or its first line says how to run it (issue 59, item 14); and a
dry run's install line says what the environment lacks without a FAILED beside "dry run ok" (item 19).
Fast: no pats command runs (tests/test_verl_smoke.py runs the script whole)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pats.testing.scripts import load_script
from pats.testing.verl import require_verl_or_skip

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "verl-smoke"


def clone(tmp_path: Path, venv: bool) -> Path:
    """A clone of the script, its pats the repository's, with or without a .venv whose python is this
    environment's (a wrapper: a symlink would not find this venv's pyvenv.cfg)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "verl-smoke")
    (tmp_path / "pats").symlink_to(REPO / "pats")
    if venv:
        python = tmp_path / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
    return tmp_path / "scripts" / "verl-smoke"


def without_site(script: Path, *args: str) -> subprocess.CompletedProcess:
    """The script under this Python with no site-packages (-S): omegaconf and pydantic do not import."""
    return subprocess.run(
        [sys.executable, "-S", str(script), *args], capture_output=True, text=True, timeout=120
    )


def test_without_pats_and_without_a_venv_the_first_line_says_how_to_run_it(tmp_path):
    script = clone(tmp_path, venv=False)
    done = without_site(script, "--help")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"verl-smoke: {sys.executable} cannot import pats' dependencies (No module named 'omegaconf'): run "
        f"it with the Python of the environment pats and the route are installed in, e.g. "
        f"`/path/to/venv/bin/python {script} ...`, or activate that environment first (`source "
        "/path/to/venv/bin/activate`); docs/verl.md, The first hour on a GPU, step 1"
    ]


def test_without_pats_it_runs_again_with_the_clones_venv(tmp_path):
    script = clone(tmp_path, venv=True)
    done = without_site(script, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"verl-smoke: {sys.executable} lacks pats (No module named 'omegaconf'); running with "
        f"{tmp_path / '.venv' / 'bin' / 'python'}"
    )
    assert done.stdout.startswith("usage: verl-smoke")


def test_a_dry_runs_install_line_says_differs_not_failed(tmp_path, capsys):
    require_verl_or_skip()
    smoke = load_script(SCRIPT, "verl_smoke")
    checks = {name: smoke.Check(name) for name in smoke.CHECKS}
    checks["install"] = smoke.Check("install", False, 1.0, "route cuda13 (--route): vllm is not installed")
    checks["plan"] = smoke.Check("plan", True, 8.0, "peak 46.4 GB (rollout) of 85 GB: fits")
    checks["export"] = smoke.Check("export", True, 30.0, "/x/bundle")
    assert smoke.finish(tmp_path, checks, dry_run=True) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out
    assert "  install            differs     1 s  route cuda13 (--route): vllm is not installed\n" in out
    assert out.splitlines()[-1] == (
        "verl-smoke: dry run ok (the launches were not run); this environment differs from the route "
        "(install, above): the GPU node needs it"
    )
    checks["export"] = smoke.Check("export", False, 30.0, "exit 2")  # a real failure still says FAILED
    assert smoke.finish(tmp_path, checks, dry_run=True) == 1
    assert "  export             FAILED     30 s  exit 2\n" in capsys.readouterr().out


def test_the_script_starts_as_is_from_this_environment():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: verl-smoke"), done.stderr
