"""The memory plan's CPU-checkable terms against a measured peak (issue 33).

pats.backends.verl.plan estimates a GPU's memory from parameter, gradient and Adam-state sizes,
per-token activations and the logits of a pass. A CPU cannot run verl, but the same formulas describe
one GRPO update of the local backend: the embedded SmolLM2-135M trained whole (no LoRA) in fp32 with
AdamW, without gradient checkpointing, its log-probs computed 256 tokens at a time (logprob_chunk). This
script measures that update's peak resident memory at three sequence lengths, each in a fresh child
process, and prints it beside the plan's estimate of the same terms:

  estimate = parameters + gradients + Adam states (4 + 4 + 8 bytes per parameter)
             + activations (pats.backends.verl.plan.layer_activation_bytes, fp32, torch SDPA)
             + logits (3 x 256 x vocabulary x 4 bytes)
  (or the optimizer step's parameters + gradients + Adam states + its sqrt(v) temporary, if larger)
  measured = the child's peak resident memory (VmHWM, reset after a first update so that Adam's states
             exist) minus its resident memory after imports, before the model loads

The verl-only terms (bf16 logits of a whole pass, gradient checkpointing, FSDP sharding and gathering,
the rollout engine's share) are not checked here: nothing of them has run on a GPU. One thread, one
child at a time; run it niced: the machine is shared, so other processes do not change a child's own
resident memory, only its time. Writes bench/results/memory_plan.json.

    nice -n 10 python bench/perf/memory_plan.py [--lengths 256 512 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, write_result

CHUNK = 256  # LocalTrainerSpec.logprob_chunk's default


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(length: int) -> dict:
    """One update at `length` tokens after a first one; peak and baseline resident memory in bytes."""
    import torch
    import transformers  # noqa: F401  (imported before the baseline: the policy imports it to load)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    from pats.backends.local.items import TrainItem
    from pats.backends.local.memory import release_free_memory
    from pats.backends.local.policy import LocalPolicy
    from pats.spec.models import EMBEDDED_POLICY, LocalTrainerSpec, PolicySpec

    torch.set_num_threads(1)
    baseline = _status_kib("VmRSS") * 1024
    policy = LocalPolicy(
        PolicySpec(model=EMBEDDED_POLICY, lora=None, dtype="float32"),
        LocalTrainerSpec(
            device="cpu",
            threads=1,
            autocast_bf16=False,
            micro_batch=1,
            logprob_chunk=CHUNK,
            update_prefix_sharing=False,
            kl_coef=0.0,
        ),
        seed=0,
    )
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40000, (length,), generator=generator).tolist()
    item = TrainItem.of(ids[: length // 2], ids[length // 2 :], advantage=1.0)
    policy.update([item])  # creates Adam's states
    release_free_memory()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident memory
    before = _status_kib("VmRSS") * 1024
    stats = policy.update([item])
    peak = _status_kib("VmHWM") * 1024
    return {
        "length": length,
        "baseline": baseline,
        "before_update": before,
        "peak": peak,
        "steps": stats["steps"],
    }


def estimate(length: int) -> dict:
    from pats.backends.verl.plan import GB, activation_term, chunked_logits_term, model_shape, state_terms
    from pats.spec.models import EMBEDDED_POLICY

    shape = model_shape(EMBEDDED_POLICY)
    states = state_terms(shape.params, shape.params, 1, 4)
    # the update's targets are tokens 1..T-1: T - 1 positions of logits, T positions of activations
    act = activation_term(shape, length, 4, checkpointing=False, attention_copy=True)
    logits = chunked_logits_term(CHUNK, shape.vocab, "chunked")
    update = states["params"].gb + states["grads"].gb + states["adam"].gb + act.gb + logits.gb
    step = states["params"].gb + states["grads"].gb + states["adam"].gb + states["step"].gb
    return {
        "states_gb": states["params"].gb + states["grads"].gb + states["adam"].gb,
        "activations_gb": act.gb,
        "logits_gb": logits.gb,
        "estimate_gb": max(update, step),
        "phase": "update" if update >= step else "optimizer step",
        "gb": GB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[256, 512, 1024], help="tokens per sequence"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows = []
    for length in args.lengths:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(length)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        est = estimate(length)
        peak_gb = (measured["peak"] - measured["baseline"]) / est["gb"]
        rows.append(est | measured | {"measured_gb": peak_gb, "ratio": est["estimate_gb"] / peak_gb})
        row = rows[-1]
        print(
            f"{length:5d} tokens: estimate {row['estimate_gb']:.2f} GB ({row['phase']}: states "
            f"{row['states_gb']:.2f} + activations {row['activations_gb']:.2f} + logits {row['logits_gb']:.2f}), "
            f"measured {peak_gb:.2f} GB, estimate / measured {row['ratio']:.2f}",
            flush=True,
        )
    print("\n| tokens | states | activations | logits | estimate | measured | estimate / measured |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['length']} | {r['states_gb']:.2f} | {r['activations_gb']:.2f} | {r['logits_gb']:.2f} | "
            f"{r['estimate_gb']:.2f} | {r['measured_gb']:.2f} | {r['ratio']:.2f} |"
        )
    out = write_result("memory_plan", {"rows": rows, "unit": "GB (1e9 bytes)"}, RESULTS)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
