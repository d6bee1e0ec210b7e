"""A third-party environment, registered by entry point, runs from a YAML spec (issue 15).

The example package examples/guess_env is made importable the way `pip install` would: its module on
the path and a `*.dist-info` folder whose entry_points.txt holds what its pyproject.toml declares, so
`importlib.metadata` finds the entry point exactly as it finds an installed one. Each check runs `pats`
in a fresh process, because the spec's environment union is built when pats.spec is first imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pats.logging.events import EvalEvent, GroupsEvent, read_events

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

pytestmark = pytest.mark.slow


def install(site: Path, example: Path, entry_points: dict[str, str]) -> None:
    """What `pip install` leaves for importlib.metadata: the module and a dist-info folder."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(example / "guess_env.py", site / "guess_env.py")
    info = site / "pats_guess_env-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pats-guess-env\nVersion: 0.1.0\n")
    lines = ["[pats.environments]", *(f"{name} = {value}" for name, value in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def pats(site: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline")
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "pats", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def example(repo) -> Path:
    return repo / "examples" / "guess_env"


@pytest.fixture(scope="module")
def declared(example) -> dict[str, str]:
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    return project["entry-points"]["pats.environments"]


def test_plugin_environment_trains_from_a_yaml_spec(tmp_path, repo, example, declared):
    assert declared == {"guess": "guess_env:GuessEnvSpec"}
    site = tmp_path / "site"
    install(site, example, declared)
    spec = example / "spec.yaml"

    shown = pats(site, "show", str(spec), cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "kind: guess" in shown.stdout and "boxes: 4" in shown.stdout
    assert "game:" not in shown.stdout  # the quickstart's twx section was replaced, not merged

    # No evaluation before training (the quickstart's now has one): it draws from the policy's sampling
    # stream, and with those draws both of this run's reviews were COMPRESS on an empty scaffold, which
    # writes no version, so the check below could not see the scaffold reviewed on guess cards.
    tiny = [
        "trainer.steps=2",
        "trainer.tasks_per_step=2",
        "eval.num_tasks=4",
        "eval.every=2",
        "eval.at_start=false",
    ]
    ran = pats(
        site, "run", str(spec), *tiny, f"logging.root={tmp_path / 'runs'}", "logging.progress=false", cwd=repo
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    run_dir = tmp_path / "runs" / "guess-pats"
    groups = [g for e in read_events(run_dir / "events.jsonl", GroupsEvent) for g in e.groups]
    assert len(groups) == 4 and all(g.task.startswith("guess:train:") for g in groups)
    assert all(len(g.rewards) == 4 and set(g.rewards) <= {0.0, 1.0} for g in groups)
    evals = read_events(run_dir / "events.jsonl", EvalEvent)
    assert evals and 0.0 <= evals[-1].metrics["eval/success"] <= 1.0
    assert 1.0 <= evals[-1].metrics["eval/turns"] <= 3.0  # guess's own max_turns
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {m["step"] for m in metrics} >= {0, 1}
    assert list((run_dir / "scaffold" / "versions").iterdir()), "the scaffold was reviewed on guess cards"


def test_without_the_plugin_the_kind_is_refused_with_the_known_ones(repo, example):
    out = pats(None, "validate", str(example / "spec.yaml"), cwd=repo)
    assert out.returncode == 2
    assert "guess" in out.stdout + out.stderr and "twx" in out.stdout + out.stderr


def test_a_plugin_with_the_wrong_kind_is_skipped_with_a_reason(tmp_path, repo, example):
    site = tmp_path / "site"
    install(site, example, {"boxes": "guess_env:GuessEnvSpec"})  # the name is not the class's kind
    out = pats(site, "validate", str(repo / "experiments" / "quickstart.yaml"), cwd=repo)
    assert out.returncode == 0, out.stderr  # the built-in environments still work
    assert "environment plugin 'boxes'" in out.stderr and 'Literal["boxes"]' in out.stderr
