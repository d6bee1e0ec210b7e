"""scripts/verl-smoke, the first GPU run's one command: its dry run on either install route (the route
from --route or the driver, the plan for the GPU nvidia-smi lists), its launches with a passed-through
override run on this CPU machine up to the launch's preflight, and its checks of the run directory
tell a whole run from one with a piece missing. The launches have not run on a GPU (docs/verl.md,
"What has run where")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pats.backends.verl.preflight import Gpu
from pats.testing.scripts import load_script
from pats.testing.verl import require_verl_or_skip

require_verl_or_skip()

pytestmark = pytest.mark.slow  # pats commands in subprocesses (~30 s a run)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "verl-smoke"
CHECKS = ("install", "plan", "export", "first step", "checkpoint", "resume", "metrics", "scaffold versions")
FLASH = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"


def smoke_module():
    return load_script(SCRIPT, "verl_smoke")


def run_smoke(tmp_path: Path, *args: str, nvidia_smi: str | None = None) -> subprocess.CompletedProcess:
    """The script in a subprocess; `nvidia_smi`: what a stand-in nvidia-smi on PATH prints (this machine
    has none), as the real one answers `--query-gpu=name,memory.total,driver_version --format=csv,...`."""
    env = dict(os.environ)
    if nvidia_smi is not None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{nvidia_smi}'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, env=env
    )


def summary(said: str) -> dict[str, str]:
    """The final check lines: name -> the rest of the line."""
    lines = said.split("checks (", 1)[1].splitlines()[1:]
    found = {}
    for line in lines:
        for name in CHECKS:
            if line.startswith(f"  {name} "):
                found[name] = line[2 + len(name) :].strip()
    return found


@pytest.mark.parametrize(
    ("route", "gpu", "planned"),
    [
        # --route wins over the driver's own route (580: cuda13); the plan is for the GPU listed: 85 GB
        ("cuda12", "NVIDIA H100 80GB HBM3, 81559, 580.95.05", 85),
        ("cuda13", None, 80),  # no nvidia-smi here: the plan is for 80 GB
    ],
)
def test_the_dry_run_on_each_route_validates_plans_and_exports(tmp_path, route, gpu, planned):
    out = tmp_path / "smoke"
    done = run_smoke(tmp_path, "--dry-run", "--route", route, str(out), nvidia_smi=gpu)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    said = done.stdout
    for title in ("== validate", "== memory plan", "== export", "== dry run: not launched"):
        assert title in said
    assert f"install: route {route} (--route)" in said
    # This CPU machine has neither route's packages: the check names them and the route's install line.
    command = {"cuda12": "vllm==0.19.1 torch==2.10.0", "cuda13": '"verl[vllm]==0.9.1"'}[route]
    assert "torch is a CPU build" in said and command in said
    assert "peak " in said and f"of {planned} GB: fits" in said
    assert f"gpu_memory_gb: {planned}" in (out / "smoke.yaml").read_text()
    lines = summary(said)
    assert list(lines) == list(CHECKS)
    assert lines["plan"].startswith("ok") and lines["export"].startswith("ok")
    assert lines["install"].startswith("differs") and "FAILED" not in said  # not counted in a dry run
    assert said.splitlines()[-1].startswith("verl-smoke: dry run ok (the launches were not run); this")
    assert all(lines[name].startswith("-") and "not run (dry run)" in lines[name] for name in CHECKS[3:])
    assert [c["name"] for c in json.loads((out / "checks.json").read_text())] == list(CHECKS)
    launch = (out / "bundle" / "launch.sh").read_text()
    assert "attn_implementation=sdpa" in launch and "trainer.save_freq=1" in launch
    assert "trainer.total_training_steps=2" in launch and "actor_rollout_ref.model.lora_rank" not in launch
    assert (out / "bundle" / "train.parquet").is_file()
    assert not (out / "run").exists(), "a dry run launches nothing"


def test_the_launches_take_the_overrides_and_stop_where_this_cpu_machine_does(tmp_path):
    """Not a dry run, on a machine without a GPU: the override given after OUT reaches the spec, the
    plan, the export and launch 1, whose preflight refuses this node; the script stops there."""
    import torch

    from pats.backends.verl.config import import_error

    if torch.cuda.is_available() or import_error("flash_attn") is None:
        pytest.skip("this machine has a GPU or flash-attn: the preflight would not refuse it")
    out = tmp_path / "smoke"
    done = run_smoke(tmp_path, str(out), FLASH, "--spec", "trainer.gpu_memory_utilization=0.3")
    said = done.stdout
    assert done.returncode == 1, said[-3000:] + done.stderr[-2000:]
    assert FLASH in (out / "smoke.yaml").read_text()
    assert "0.3 x 80 GB" in said  # the --spec override reached the plan
    assert "attention mask (SDPA" not in said  # the plan read the attention the override names
    assert FLASH in (out / "bundle" / "launch.sh").read_text()
    log = (out / "launch1.log").read_text()
    # launch.sh's preflight composed the launch's config with the override, and refused this node.
    assert "attn_implementation=flash_attention_2" in log and "flash_attn does not import here" in log
    assert "is a CPU build" in log
    lines = summary(said)
    assert lines["plan"].startswith("ok") and lines["export"].startswith("ok")
    assert lines["first step"].startswith("FAILED") and lines["install"].startswith("FAILED")
    assert "not run: checkpoint, resume, metrics, scaffold versions" in said
    assert not (out / "launch2.log").exists()


def test_the_route_follows_the_driver():
    smoke = smoke_module()
    gpu = Gpu("NVIDIA A100-SXM4-80GB", 81920, "570.124.06")
    assert smoke.pick_route(None, [gpu])[0].name == "cuda12"
    assert smoke.pick_route(None, [Gpu(gpu.name, gpu.memory_mib, "580.95.05")])[0].name == "cuda13"
    assert smoke.pick_route(None, [Gpu(gpu.name, gpu.memory_mib, "470.256.02")])[0] is None
    route, why = smoke.pick_route(None, [])
    assert route is None and "no NVIDIA driver answers here" in why
    assert round(gpu.memory_gb, 1) == 85.9  # 81,920 MiB in the plan's 10^9 bytes


def test_the_checks_tell_a_whole_run_from_one_missing_a_piece(tmp_path):
    smoke = smoke_module()
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_1").mkdir(parents=True)
    tracker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
    tracker.write_text("1")
    ends = [{"v": 1, "event": "step_end", "step": s} for s in (0, 1)]
    events = run / "events.jsonl"
    events.write_text(json.dumps(ends[0]) + "\n")
    assert smoke.checkpoint_check(run, 0.0).ok
    # launch 2 wrote step 2's checkpoint and ended the scaffold's step 1
    (run / "checkpoints" / "global_step_2").mkdir()
    tracker.write_text("2")
    events.write_text("".join(json.dumps(x) + "\n" for x in ends))
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    (run / "scaffold" / "versions").mkdir(parents=True)
    (run / "scaffold" / "versions" / "000001.json").write_text("{}")
    for check in (smoke.resume_check, smoke.metrics_check, smoke.versions_check):
        assert check(run, 0.0).ok, check(run, 0.0)
    # a resumed launch that played step 1 again, and lost the metrics of step 1
    events.write_text("".join(json.dumps(x) + "\n" for x in [*ends, ends[1]]))
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    resumed = smoke.resume_check(run, 0.0)
    assert not resumed.ok and "step ends [0, 1, 1]" in resumed.detail
    assert not smoke.metrics_check(run, 0.0).ok
    (run / "checkpoints" / "global_step_1").rmdir()
    assert "no " in smoke.checkpoint_check(run, 0.0).detail
