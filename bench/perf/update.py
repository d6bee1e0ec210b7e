"""Cost of one GRPO update, several ways, on the same decisions, side by side in one process.

Score mode (the default):
- `per-decision`: every decision its own forward/backward pass over its whole prompt;
- `shared`: decisions with the same prompt and candidates share one pass (`trainer.update_prefix_sharing:
  false`: the rollouts of a group share their first prompt, and more when they take the same actions);
- `prefix`: decisions whose prompts share a prefix (the system prompt of a rollout group) run it once
  with gradients, and their suffixes in packed passes against its keys/values (the default);
- `shared+top8`, `prefix+top8`: the same, with LoRA adapters on the top 8 of 30 layers only
  (`policy.lora.top_layers`), so the backward pass stops there;
- `prefix-cast`: `prefix` with autocast casting the frozen weights to bf16 in every pass, as before
  the update held bf16 copies of them (`LocalPolicy.bf16_weights`);
- `prefix-keep`: `prefix` keeping the prefix pass's activations through its group's passes instead of
  recomputing them in backward (`sharing.RECOMPUTE_PREFIX`, issue 25);
- `prefix-untrimmed`: `prefix` without `malloc_trim` after each backward pass (memory.py);
- `prefix-half`: `prefix` with half as many suffix tokens per pass (`sharing.PASS_TOKENS`);
- `prefix-flash`: `prefix` with torch's SDPA (flash attention on a CPU) in the passes with gradients
  instead of the recomputed math core (`attention.RECOMPUTED`), as before 2026-12-07 (in fp32 on an
  AVX2-only EPYC: 1.06x, within that machine's noise; bench/results/update_tasks3_prefix_prefix-flash_fp32-avx2.json).
Generate mode (`--action generate`, `--new-tokens` per turn): `whole` (each sequence whole,
`trainer.micro_batch` per pass), `prefix` (the prefix once, the rests of prompt and response against
it), both `+top8`, and `prefix-cast`.

The decisions come from real quickstart episodes (SmolLM2-135M, twc, 10 turns), every one with an
advantage. Timings alternate between the variants, `--repeats` rounds, median reported; the machine is
shared, so compare the ratios, not the seconds. Then each variant's update once more under torch's
FLOP counter (forward, backward and recomputation, padding included): achieved GFLOP/s beside a bf16
matmul at a pass's row count (x 576 x 1536) and at 2048^3. Writes bench/results/update.json
(update_tasks<N>.json for --tasks N > 1, update_generate*.json in generate mode; `--tasks 4` is the
issue's 16-episode quickstart batch; with `--only`, those variants alone, update_<names>.json).

    python bench/perf/update.py [--tasks 1] [--repeats 2] [--turns 10] [--action generate] [--only prefix ...]

The kernel caches' cap (memory.small_kernel_caches) is read once per process: compare it by running
this twice, once with LRU_CACHE_CAPACITY=1024 ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 (torch's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, action_overrides, add_action_flags, write_result
from bench.perf.flops import MODEL_SHAPE, counted_gflop, matmul_gflops
from pats.backends.local import attention, sharing, training
from pats.backends.local.backend import LocalBackend
from pats.backends.local.items import ChoiceItem
from pats.backends.local.memory import release_free_memory
from pats.backends.local.policy import LocalPolicy
from pats.engine.run import check_policy_inputs, make_env_factory
from pats.protocols import GroupPlan
from pats.spec import load_spec
from pats.types import EMPTY_VIEW

SPEC = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def decisions(backend: LocalBackend, tasks: int) -> list[tuple]:
    """(stored decision, advantage, weight) of `tasks` groups of 4 real episodes."""
    make_env = make_env_factory(backend.spec)
    plans = [GroupPlan(task=t, view=EMPTY_VIEW, size=4) for t in make_env().tasks("train")[:tasks]]
    out = []
    for played in asyncio.run(backend.rollout(0, plans)):
        for i, stored in enumerate(played.training):
            out += [(s, 1.0 if i % 2 else -1.0, 1 / len(stored)) for s in stored]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1, help="groups of 4 episodes to collect decisions from")
    parser.add_argument("--repeats", type=int, default=2, help="timing rounds; the median is reported")
    parser.add_argument("--turns", type=int, default=None, help="episode length (default: the spec's, 10)")
    parser.add_argument(
        "--only", nargs="+", default=None, help="run these variants only (the first is the base)"
    )
    add_action_flags(parser)
    args = parser.parse_args()

    overrides = [] if args.turns is None else [f"environment.max_turns={args.turns}"]
    overrides += action_overrides(args)
    spec = load_spec(SPEC, overrides)
    check_policy_inputs(spec)  # what `pats run` checks before a model loads
    backend = LocalBackend(spec, make_env_factory(spec))
    stored = decisions(backend, args.tasks)
    asyncio.run(backend.close())
    trainer, lora = spec.local_trainer(), spec.policy.lora
    if lora is None:
        parser.error("the update variants compare LoRA settings: the spec needs policy.lora")
    top = spec.policy.model_copy(update={"lora": lora.model_copy(update={"top_layers": 8})})
    top_policy = LocalPolicy(top, trainer, spec.seed)
    # name -> (policy, trainer.update_prefix_sharing); the first is the baseline of the ratios.
    # Without prefix sharing: score mode's shared passes (and one pass per decision), generate mode's
    # whole sequences.
    plain = "shared" if args.action == "score" else "whole"
    variants = {"per-decision": (backend.policy, False)} if args.action == "score" else {}
    variants |= {
        plain: (backend.policy, False),
        f"{plain}+top8": (top_policy, False),
        "prefix": (backend.policy, True),
        "prefix-cast": (backend.policy, True),
        "prefix+top8": (top_policy, True),
        "prefix-keep": (backend.policy, True),
        "prefix-untrimmed": (backend.policy, True),
        "prefix-half": (backend.policy, True),
        "prefix-flash": (backend.policy, True),
    }
    if args.only:
        unknown = [name for name in args.only if name not in variants]
        if unknown:
            parser.error(f"--only: unknown variants {unknown}; known: {', '.join(variants)}")
        variants = {name: variants[name] for name in args.only}
    pairs = {
        f"prefix/{plain}": ("prefix", plain),
        f"prefix+top8/{plain}+top8": ("prefix+top8", f"{plain}+top8"),
        "prefix/prefix-cast": ("prefix", "prefix-cast"),
        "prefix/prefix-keep": ("prefix", "prefix-keep"),
        "prefix/prefix-untrimmed": ("prefix", "prefix-untrimmed"),
        "prefix-half/prefix": ("prefix-half", "prefix"),
        "prefix/prefix-flash": ("prefix", "prefix-flash"),
    }
    pairs = {pair: (a, b) for pair, (a, b) in pairs.items() if a in variants and b in variants}

    pass_tokens = sharing.PASS_TOKENS

    def run(name: str) -> float:
        items = [backend.train_item(s, adv, w) for s, adv, w in stored]
        policy, prefix_sharing = variants[name]
        policy.trainer = trainer.model_copy(update={"update_prefix_sharing": prefix_sharing})
        if name == "prefix-cast":  # autocast casting the frozen weights in every pass
            # (ignore: the method is shadowed on this instance for one variant; `finally` removes it)
            policy.bf16_weights = nullcontext  # type: ignore[method-assign]
        sharing.RECOMPUTE_PREFIX = name != "prefix-keep"
        attention.RECOMPUTED = name != "prefix-flash"
        sharing.PASS_TOKENS = pass_tokens // 2 if name == "prefix-half" else pass_tokens
        training.release_free_memory = (lambda: None) if name == "prefix-untrimmed" else release_free_memory
        try:
            start = time.perf_counter()
            training.run_update(policy, items, one_per_pass=name == "per-decision")  # = policy.update
            return time.perf_counter() - start
        finally:
            vars(policy).pop("bf16_weights", None)
            sharing.RECOMPUTE_PREFIX, training.release_free_memory = True, release_free_memory
            attention.RECOMPUTED = True
            sharing.PASS_TOKENS = pass_tokens

    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name in variants:
            seconds[name].append(run(name))
            print(f"  {name}: {seconds[name][-1]:.1f} s", flush=True)
    gflop = {name: counted_gflop(functools.partial(run, name)) for name in variants}

    items = [backend.train_item(s, adv, w) for s, adv, w in stored]
    groups = training.update_groups(items, trainer.micro_batch, prefix_sharing=True)
    unshared = training.update_groups(items, trainer.micro_batch, prefix_sharing=False)
    prompt_tokens = sum(len(it.prompt_ids if isinstance(it, ChoiceItem) else it.input_ids) for it in items)
    median = {name: statistics.median(v) for name, v in seconds.items()}
    base = next(iter(variants))
    results = {
        "machine": f"{torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "action": args.action,
        "decisions": len(items),
        "passes_shared": sum(len(g.units) for g in unshared),
        "prefixes": len(groups),
        "prefix_tokens": [len(g.prefix) for g in groups],
        "passes_prefix": sum(len(g.units) for g in groups),
        "mean_tokens": prompt_tokens / len(items),  # score: prompts; generate: prompt + response
        "seconds": seconds,
        "median_s": median,
        "ratio_to_" + base: {name: median[name] / median[base] for name in variants},
        "ratios": {pair: median[a] / median[b] for pair, (a, b) in pairs.items()},
        "gflop": gflop,
        "gflops": {name: gflop[name] / median[name] for name in variants},
        "matmul_bf16_gflops_pass_rows": matmul_gflops(sharing.PASS_TOKENS, *MODEL_SHAPE),
        "matmul_bf16_gflops_2048": matmul_gflops(2048, 2048, 2048),
    }
    name = "update" if args.action == "score" else "update_generate"
    name += "" if args.tasks == 1 else f"_tasks{args.tasks}"
    name += "" if not args.only else "_" + "_".join(args.only)
    out = write_result(name, {"episodes": 4 * args.tasks, **results}, RESULTS)
    print(f"wrote {out}")
    print(f"decisions: {len(items)}, passes without prefix sharing: {results['passes_shared']}")
    print(
        f"prefix sharing: {len(groups)} prefixes of {results['prefix_tokens']} tokens "
        f"({results['mean_tokens']:.0f} tokens per decision on average), {results['passes_prefix']} passes"
    )
    for name in variants:
        print(
            f"{name}: median {median[name]:.1f} s ({median[name] / median[base]:.2f}x of {base}); "
            f"{gflop[name]:.0f} GFLOP run, {results['gflops'][name]:.0f} GFLOP/s"
        )
    print(", ".join(f"{pair}: {ratio:.2f}x" for pair, ratio in results["ratios"].items()))
    print(
        f"bf16 matmul: {results['matmul_bf16_gflops_pass_rows']:.0f} GFLOP/s at "
        f"({sharing.PASS_TOKENS} x {MODEL_SHAPE[0]}) @ {MODEL_SHAPE}, "
        f"{results['matmul_bf16_gflops_2048']:.0f} GFLOP/s at 2048^3"
    )


if __name__ == "__main__":
    main()
