"""scripts/verl-smoke, the first GPU run's one command: its dry run (every step but the two launches)
passes here, and its check of the run directory tells a whole run from one with a piece missing. The
launches themselves have not run (docs/verl.md, "What has run where")."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from pats.testing.verl import require_verl_or_skip

require_verl_or_skip()

pytestmark = pytest.mark.slow  # three pats commands in subprocesses (~30 s)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "verl-smoke"


def test_the_dry_run_writes_validates_plans_and_exports_the_smoke_run(tmp_path):
    out = tmp_path / "smoke"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = done.stdout
    for title in ("== validate", "== memory plan", "== export", "== dry run: not launched"):
        assert title in said
    assert "Qwen/Qwen2.5-0.5B-Instruct" in said and "KV cache" in said
    launch = (out / "bundle" / "launch.sh").read_text()
    assert "attn_implementation=sdpa" in launch and "trainer.save_freq=1" in launch
    assert "trainer.total_training_steps=2" in launch and "actor_rollout_ref.model.lora_rank" not in launch
    assert (out / "bundle" / "train.parquet").is_file()
    assert not (out / "run").exists(), "a dry run launches nothing"


def test_what_ran_tells_a_whole_run_from_one_missing_a_piece(tmp_path):
    smoke = SourceFileLoader("verl_smoke", str(SCRIPT)).load_module()
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_1").mkdir(parents=True)
    (run / "checkpoints" / "global_step_2").mkdir()
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    lines = [{"v": 1, "event": "step_end", "step": s} for s in (0, 1)] + [
        {"v": 1, "event": "version", "step": 0}
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert smoke.what_ran(run) == []
    (run / "checkpoints" / "global_step_1").rmdir()
    (run / "events.jsonl").write_text(json.dumps(lines[0]) + "\n")  # the resumed step never ended
    problems = smoke.what_ran(run)
    assert "no checkpoint global_step_1" in problems and any("step ends [0]" in p for p in problems)
