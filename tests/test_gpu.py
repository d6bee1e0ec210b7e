"""The local backend on a CUDA GPU: what the CPU tests cannot show (opt-in: `pytest -m gpu`).

- The prefix-shared update gives the whole-sequence gradient on CUDA, in fp32 (the CPU test's
  tolerance) and under bf16 autocast (the GPU default), within a stated tolerance.
- A 2-step quickstart on CUDA plays the same episodes, cards and edits on the fast path (batched
  acting, prefix-shared update) as on the older paths (tests/test_fast_path_same_run.py on CUDA).
- Acting throughput on CUDA (score-mode decisions/s, generate-mode tokens/s), printed.

The model is `$PATS_GPU_MODEL` (a model folder) when set, else the embedded SmolLM2. scripts/gpu-check
sets it to a stand-in with SmolLM2-135M's architecture and tokenizer and seeded random weights (the
embedded GGUF does not fit what a device check may carry; see docs/running.md). Where TextWorld-
Express or Java is missing, the quickstart plays `pats.testing.FakeEnv` in its place (said in the
report). Measurements go to `$PATS_GPU_REPORT` (a JSON file) when set.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from pats.logging.events import Event

# scripts/gpu-check --dry-run sets cpu: the same tests on the CPU, to check the code, not the GPU.
DEVICE = os.environ.get("PATS_GPU_CHECK_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

FP32_TOLERANCE = 5e-4  # of the largest gradient element, as tests/test_update_prefix.py on the CPU
# Under bf16 autocast both paths round (8 bits of mantissa) in different orders, so neither is exact:
# the prefix-shared gradient may be no farther from the whole-sequence bf16 gradient than BF16_FACTOR
# times that gradient's own distance from the fp32 one (bf16's rounding), norms of the whole LoRA
# gradient. Measured on this CPU under bf16 autocast (SmolLM2-135M, kl 0): sharing 2.8e-2, rounding 3.4e-2.
BF16_FACTOR = 2.0


def model_name() -> str:
    from pats.spec.models import EMBEDDED_POLICY

    return os.environ.get("PATS_GPU_MODEL", EMBEDDED_POLICY)


def record(key: str, value) -> None:
    """Add a measurement to $PATS_GPU_REPORT (read back by scripts/gpu-check) and print it."""
    print(f"{key}: {value}")
    path = os.environ.get("PATS_GPU_REPORT")
    if path:
        report = json.loads(Path(path).read_text()) if Path(path).is_file() else {}
        report[key] = value
        Path(path).write_text(json.dumps(report, indent=1))


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def cuda_policy(autocast: bool):
    from pats.backends.local import LocalPolicy
    from pats.spec.models import LocalTrainerSpec, LoraSpec, PolicySpec

    trainer = LocalTrainerSpec(device=DEVICE, autocast_bf16=autocast, max_grad_norm=1e9)
    policy = LocalPolicy(
        PolicySpec(model=model_name(), action="score", lora=LoraSpec(rank=4, alpha=8)), trainer, 0
    )
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)  # every adapter matrix gets a gradient
    assert policy.device.type == DEVICE and (policy.autocast == autocast or DEVICE == "cpu")
    return policy


def _distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """|a - b| / |b| over the whole gradient (every LoRA matrix in one vector)."""
    a_, b_ = torch.cat([g.flatten().double() for g in a]), torch.cat([g.flatten().double() for g in b])
    return float((a_ - b_).norm() / b_.norm())


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_the_prefix_shared_update_gives_the_whole_sequence_gradient_on_cuda(monkeypatch, kl_coef):
    from test_update_prefix import _sequences, _update

    policy = cuda_policy(autocast=True)
    bf16 = policy.autocast  # False on a CPU without native bf16 (dry run): then both checks are fp32
    monkeypatch.setattr(policy, "autocast", False)
    fp32_slow, fp32_slow_grads = _update(policy, monkeypatch, False, kl_coef, _sequences, 4)
    fp32_fast, fp32_fast_grads = _update(policy, monkeypatch, True, kl_coef, _sequences, 4)
    monkeypatch.setattr(policy, "autocast", bf16)
    slow, slow_grads = _update(policy, monkeypatch, False, kl_coef, _sequences, 4)
    fast, fast_grads = _update(policy, monkeypatch, True, kl_coef, _sequences, 4)

    # fp32: the CPU test's tolerance, element by element.
    assert fp32_fast["loss"] == pytest.approx(fp32_slow["loss"], rel=1e-4, abs=1e-6)
    assert all(g.abs().max() > 0 for g in fp32_slow_grads)  # every LoRA matrix is trained
    scale = max(float(g.abs().max()) for g in fp32_slow_grads)
    fp32_err = max(float((a - b).abs().max()) for a, b in zip(fp32_fast_grads, fp32_slow_grads, strict=True))
    # bf16: sharing adds no more than bf16's own rounding (see BF16_FACTOR).
    sharing, rounding = _distance(fast_grads, slow_grads), _distance(slow_grads, fp32_slow_grads)
    record(
        f"prefix_sharing_grad_kl{kl_coef}",
        {
            "fp32_max_element_over_largest": fp32_err / scale,
            "bf16": bf16,
            "bf16_sharing_distance": sharing,
            "bf16_rounding_distance": rounding,
            "bf16_loss": [fast["loss"], slow["loss"], fp32_slow["loss"]],
        },
    )
    assert fp32_err <= FP32_TOLERANCE * scale, fp32_err / scale
    assert sharing <= max(BF16_FACTOR * rounding, 1e-4), (sharing, rounding)
    assert fast["loss"] == pytest.approx(slow["loss"], rel=1e-2, abs=1e-5)


def _quickstart_env():
    """None where the real TextWorldExpress games can run here, else FakeEnv's factory in their place."""
    if importlib.util.find_spec("textworld_express") and shutil.which("java"):
        return None
    from pats.testing import FakeEnv

    return lambda spec: lambda: FakeEnv(num_tasks=8, max_turns=spec.environment.max_turns)


def run_quickstart(
    repo: Path, root: Path, overrides: list[str], monkeypatch
) -> tuple[list[Event], dict, float]:
    """(events, step-1 adapter weights, wall seconds) of the quickstart spec on CUDA."""
    from safetensors.torch import load_file

    import pats.engine.run as run_module
    from pats.logging.events import read_events
    from pats.spec import load_spec

    fake = _quickstart_env()
    if fake is not None:
        monkeypatch.setattr(run_module, "make_env_factory", fake)
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        [f"policy.model={model_name()}", f"trainer.device={DEVICE}", f"logging.root={root}", *overrides],
    )
    start = time.perf_counter()
    run_dir = asyncio.run(run_module.train(spec, run_module.new_run(spec)))
    wall = time.perf_counter() - start
    adapter = run_dir / "checkpoints" / f"step_{spec.trainer.steps - 1:06d}" / "policy" / "adapter"
    return read_events(run_dir / "events.jsonl"), load_file(next(adapter.glob("*.safetensors"))), wall


def test_a_two_step_quickstart_plays_the_same_episodes_on_the_fast_and_older_paths_on_cuda(
    repo, tmp_path, monkeypatch
):
    from test_fast_path_same_run import SLOW, SMALL

    small = [o for o in SMALL if not o.startswith("trainer.threads")]
    fast, fast_weights, fast_s = run_quickstart(repo, tmp_path / "fast", small, monkeypatch)
    slow, slow_weights, slow_s = run_quickstart(repo, tmp_path / "slow", [*small, *SLOW], monkeypatch)

    def kept(events, kind):
        return [e for e in events if e.event == kind]

    assert kept(fast, "groups") and kept(fast, "groups") == kept(slow, "groups")  # every reward
    assert kept(fast, "card") == kept(slow, "card") and kept(fast, "edit") == kept(slow, "edit")
    evals = [e.metrics["eval/success"] for e in kept(fast, "eval")]
    assert evals and evals == [e.metrics["eval/success"] for e in kept(slow, "eval")]
    distance = {n: float((fast_weights[n] - w).norm() / w.norm()) for n, w in slow_weights.items()}
    record(
        "quickstart_same_run",
        {
            "environment": "twx" if _quickstart_env() is None else "FakeEnv (no TextWorldExpress/Java here)",
            "fast_s": fast_s,
            "older_s": slow_s,
            "max_adapter_relative_distance": max(distance.values()),
        },
    )
    assert max(distance.values()) < 1e-2


def test_acting_throughput_on_cuda():
    from pats.backends.local.scoring import PrefixStore

    policy = cuda_policy(autocast=True)
    rules = (
        "You are playing a text-based game. Choose one admissible action.\nTask: put the apple in the fridge."
    )
    batch, new_tokens = (32, 32) if DEVICE == "cuda" else (2, 4)  # the dry run only checks the code
    observations = [
        f"Observation: You are in room {i}. You see a fridge, a table and an apple." for i in range(batch)
    ]
    prompts = [policy.chat_split(rules, o) for o in observations]  # (shared system part, rest)
    actions = [["look around", "open fridge", "take apple", "go north", "put apple in fridge"]] * len(prompts)

    def timed(fn, repeats=3):
        """(seconds per call, the last call's result), after one warm-up call (kernels, caches)."""
        fn()
        synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            out = fn()
        synchronize()
        return (time.perf_counter() - start) / repeats, out

    score_s, _ = timed(lambda: policy.choose_batch(prompts, actions, greedy=False, store=PrefixStore()))
    generate_s, generated = timed(
        lambda: policy.generate_batch(prompts, new_tokens, greedy=False, store=PrefixStore())
    )
    result = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "autocast_bf16": policy.autocast,
        "batch": len(prompts),
        "score_decisions_per_s": len(prompts) / score_s,
        "generate_tokens_per_s": sum(len(ids) for ids in generated) / generate_s,
    }
    record("acting_throughput", result)
    assert result["score_decisions_per_s"] > 0 and result["generate_tokens_per_s"] > 0
