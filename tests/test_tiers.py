"""The two test tiers (tests/conftest.py, docs/testing.md): a plain `pytest` leaves the tests marked slow
out and says, in one line, how many and how to run them; `--run-slow` or PATS_RUN_SLOW=1 runs them
(that CI runs both: tests/test_readme.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# One test, marked slow, in a module that imports little (collecting it takes seconds, not a model's imports)
SLOW_TEST = "tests/test_install.py::test_a_clone_builds_and_installs_our_package"


def collect(*args: str, run_slow: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PATS_RUN_SLOW"}
    if run_slow is not None:
        env["PATS_RUN_SLOW"] = run_slow
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", SLOW_TEST, *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_a_plain_run_leaves_the_slow_tier_out_and_says_how_to_run_it():
    done = collect()
    assert done.returncode == 5, done.stdout + done.stderr  # nothing left to run
    lines = [line for line in done.stdout.splitlines() if "slow" in line]
    assert lines == [
        "1 slow test not run (the slow tier: model servers, vLLM, Ray, training runs); run them with "
        "`pytest --run-slow` or PATS_RUN_SLOW=1, that tier alone with `--run-slow -m slow` "
        "(docs/testing.md; vLLM's tests need `./scripts/install .venv --test --vllm`)"
    ], done.stdout


def test_the_switch_runs_the_slow_tier():
    for done in (collect("--run-slow"), collect(run_slow="1"), collect("--run-slow", "-m", "slow")):
        assert done.returncode == 0, done.stdout + done.stderr
        assert SLOW_TEST in done.stdout
        assert "slow test not run" not in done.stdout
