"""Crashes of a real run (SmolLM2 + TextWorldExpress, shrunk to two short steps): SIGKILL in the middle
of a step, then `pats run --resume`, must end where an uninterrupted run of the same seed ends; a
TextWorldExpress JVM killed mid-episode must not stop the run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pats.logging.events import CardEvent, GroupsEvent, StepEndEvent, read_events

pytestmark = pytest.mark.slow

# One thread per run: the two runs below go side by side, and the same thread count keeps their
# floating point identical.
TINY = [
    "trainer.steps=2",
    "trainer.tasks_per_step=1",
    "trainer.group_size=4",
    "trainer.checkpoint_every=1",
    "trainer.threads=1",
    "environment.max_turns=2",
    "environment.reward=score",
    "eval.at_start=false",
    "eval.num_tasks=1",
    "eval.with_scaffold=false",
    "logging.progress=false",
    "logging.wandb=offline",
]


def start(repo: Path, root: Path, name: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pats", "run", str(repo / "experiments/quickstart.yaml"), *TINY]
    cmd += [f"logging.root={root}", f"name={name}", *extra]
    env = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.Popen(
        cmd,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so the test can clean up its JVMs
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def summary(run_dir: Path) -> dict:
    events = read_events(run_dir / "events.jsonl")
    per_step: dict[int, list[str]] = {}
    for e in events:
        per_step.setdefault(e.step, []).append(e.event)
    versions = [
        json.loads(p.read_text())["hash"] for p in sorted((run_dir / "scaffold" / "versions").glob("*.json"))
    ]
    rewards = [g.rewards for e in events if isinstance(e, GroupsEvent) for g in e.groups]
    return {
        "ends": [e.step for e in events if isinstance(e, StepEndEvent)],
        "groups_events": {s: names.count("groups") for s, names in per_step.items() if s >= 0},
        "versions": versions,
        "rewards": rewards,
    }


def test_sigkill_mid_step_then_resume_matches_an_uninterrupted_run(repo, tmp_path):
    """Guards crash safety: a run SIGKILLed in step 1 and resumed ends, to the bit, where an
    uninterrupted run of the same seed ends (steps, events, scaffold versions, rewards, metrics,
    adapter). The two runs go side by side, 2 steps of one task group, 2 turns each."""
    clean = start(repo, tmp_path, "clean")
    killed = start(repo, tmp_path, "killed")
    run_dir = tmp_path / "killed"
    latest = run_dir / "checkpoints" / "latest.json"
    try:
        deadline = time.monotonic() + 600
        while not (latest.is_file() and json.loads(latest.read_text())["step"] == 0):
            assert killed.poll() is None, (
                f"the run ended before it could be killed: {killed.communicate()[0][-2000:]}"
            )
            assert time.monotonic() < deadline, "no checkpoint of step 0 within 10 minutes"
            time.sleep(0.2)
        time.sleep(3.0)  # into step 1: rolling out or updating, nothing of it on disk yet
        assert killed.poll() is None, "step 1 finished before the kill; the test needs a longer step"
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        _kill_group(killed)
    assert killed.returncode == -signal.SIGKILL
    assert read_events(run_dir / "events.jsonl", StepEndEvent)[-1].step == 0

    resumed = subprocess.run(
        [sys.executable, "-m", "pats", "run", "--resume", str(run_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    finish(clean)

    got, want = summary(run_dir), summary(tmp_path / "clean")
    assert got["ends"] == want["ends"] == [0, 1], "a step was lost or counted twice"
    assert got["groups_events"] == {0: 1, 1: 1}, "the half-done step left events behind"
    assert want["versions"], "the reference run made no scaffold version: nothing would be compared"
    assert got["versions"] == want["versions"]
    assert got["rewards"] == want["rewards"]
    got_metrics, want_metrics = step_metrics(run_dir), step_metrics(tmp_path / "clean")
    assert [m["step"] for m in got_metrics] == [m["step"] for m in want_metrics], (
        "metrics.jsonl lost or repeated a line"
    )
    # The values too (wall times aside): the resumed step is the step the uninterrupted run took.
    untimed = [{k: v for k, v in m.items() if not k.startswith("time/")} for m in got_metrics]
    assert untimed == [{k: v for k, v in m.items() if not k.startswith("time/")} for m in want_metrics]
    # And the policy after it: the same adapter weights, to the bit.
    got_w, want_w = adapter(run_dir), adapter(tmp_path / "clean")
    assert got_w.keys() == want_w.keys() and got_w
    assert all(torch.equal(got_w[k], want_w[k]) for k in got_w), "the resumed update differs"


def step_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def adapter(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    (weights,) = (run_dir / "checkpoints" / "step_000001" / "policy").rglob("*.safetensors")
    return load_file(weights)


def test_a_killed_jvm_fails_one_episode_and_the_run_goes_on(repo, tmp_path, kill_jvm_on_step):
    from pats.engine.run import new_run, train
    from pats.spec import load_spec

    # No expert replay at start (eval.gap_tasks=0): the steps counted are the training episodes'.
    # A JVM dying in that replay is tests/test_likelihood_gap.py's.
    overrides = [*TINY, f"logging.root={tmp_path}", "name=jvm", "eval.gap_tasks=0"]
    spec = load_spec(repo / "experiments/quickstart.yaml", overrides)
    kill_jvm_on_step(3)  # the third step of the run: one episode of step 0 is in flight
    run_dir = asyncio.run(train(spec, new_run(spec)))

    ends = read_events(run_dir / "events.jsonl", StepEndEvent)
    assert [e.step for e in ends] == [0, 1]
    assert ends[0].metrics["train/errors"] == 1.0
    assert ends[0].metrics["train/env_fault_groups_dropped"] == 1.0
    assert ends[1].metrics["train/errors"] == 0.0, "the next step should run on a restarted JVM"
    cards = [e.card for e in read_events(run_dir / "events.jsonl", CardEvent) if e.step == 0]
    failure = [c for c in cards if c.type == "failure"]
    assert failure and any("JVM" in c.text or "environment" in c.text for c in failure)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
