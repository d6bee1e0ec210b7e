"""The fast path changes the cost, not the experiment: in fp32, a real training run with the shared
system prompts (`trainer.rollout_batching`, `trainer.update_prefix_sharing`, the defaults) plays the
same episodes, builds the same cards, makes the same edits and ends at the same weights (to fp32
rounding) as the older paths given the same seed.

bf16 autocast (`trainer.autocast_bf16`, on by default where the CPU has native bf16) is a separate
choice: its rounding can move a sampled choice on either path (docs/journal/2026-12-01-speed.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pats.logging.events import EvalEvent, read_events

pytestmark = pytest.mark.slow

SMALL = [
    "trainer.steps=2",
    "trainer.tasks_per_step=2",
    "environment.max_turns=4",
    "eval.num_tasks=2",
    "eval.every=2",
    # One evaluation, after training, on the weights both paths trained (the quickstart's evaluation
    # before training would play the untrained policy again, which step 0's rollouts already compare).
    "eval.at_start=false",
    "eval.with_scaffold=false",
    "eval.gap_tasks=0",
    "trainer.autocast_bf16=false",
    # One thread per run: the two runs go side by side (one core each), and the same thread count
    # keeps their floating point identical.
    "trainer.threads=1",
    "logging.progress=false",
    "logging.wandb=disabled",
]
SLOW = ["trainer.rollout_batching=false", "trainer.update_prefix_sharing=false"]


def _start(repo, root, overrides) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pats", "run", str(repo / "experiments/quickstart.yaml"), *SMALL]
    cmd += [f"logging.root={root}", "name=run", *overrides]
    root.mkdir(parents=True)
    return subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, root):
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    run_dir = root / "run"
    events = read_events(run_dir / "events.jsonl")
    adapter = run_dir / "checkpoints" / "step_000001" / "policy" / "adapter"
    from safetensors.torch import load_file

    weights = load_file(next(adapter.glob("*.safetensors")))
    return events, weights


def test_the_fast_path_runs_the_same_experiment_in_fp32(repo, tmp_path):
    """Guards the defaults `trainer.rollout_batching` and `trainer.update_prefix_sharing` against
    changing the experiment: two 2-step fp32 runs of one seed, with and without them, must give the
    same rollouts, cards, edits and evaluation, and adapters within fp32 rounding. Two real training
    runs, each kept to what the comparison needs (2 steps of 2 tasks, 4 turns, one evaluation) and
    run side by side, one thread each (222 s one after the other on an idle 2-core machine)."""
    fast_proc = _start(repo, tmp_path / "fast", [])
    slow_proc = _start(repo, tmp_path / "slow", SLOW)
    fast, fast_weights = _finish(fast_proc, tmp_path / "fast")
    slow, slow_weights = _finish(slow_proc, tmp_path / "slow")

    def kept(events, kind):
        return [e for e in events if e.event == kind]

    assert kept(fast, "groups") == kept(slow, "groups")  # every rollout's reward, step by step
    assert kept(fast, "card") == kept(slow, "card")  # the evidence: trajectories, outcomes
    assert kept(fast, "edit") == kept(slow, "edit")
    assert len(kept(fast, "card")) >= 4 and kept(fast, "groups")
    evals = [e.metrics["eval/success"] for e in fast if isinstance(e, EvalEvent)]
    assert evals == [e.metrics["eval/success"] for e in slow if isinstance(e, EvalEvent)] and evals
    assert fast_weights.keys() == slow_weights.keys()
    # Adam's first steps move each weight by ~lr x sign(gradient), so a gradient that rounding moves
    # across zero flips that weight's step: compare whole matrices, not elements.
    distance = {name: float((fast_weights[name] - w).norm() / w.norm()) for name, w in slow_weights.items()}
    print("largest relative distance of an adapter matrix:", max(distance.values()))
    assert max(distance.values()) < 1e-2, sorted(distance.items(), key=lambda kv: -kv[1])[:3]
    assert all(w.norm() > 0 for w in slow_weights.values())  # trained (LoRA's B starts at zero)
