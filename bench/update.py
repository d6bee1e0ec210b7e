"""Cost of one score-mode GRPO update, five ways, on the same decisions, side by side in one process.

- `per-decision`: every decision its own forward/backward pass over its whole prompt;
- `shared`: decisions with the same prompt and candidates share one pass (`trainer.update_prefix_sharing:
  false`: the rollouts of a group share their first prompt, and more when they take the same actions);
- `prefix`: decisions whose prompts share a prefix (the system prompt of a rollout group) run it once
  with gradients, and their suffixes in packed passes against its keys/values (the default);
- `shared+top8`, `prefix+top8`: the same, with LoRA adapters on the top 8 of 30 layers only
  (`policy.lora.top_layers`), so the backward pass stops there.

The decisions come from real quickstart episodes (SmolLM2-135M, twc, 10 turns), every one with an
advantage. Timings alternate between the variants, `--repeats` rounds, median reported; the machine is
shared, so compare the ratios, not the seconds. Writes bench/results/update.json (update_tasks<N>.json
for --tasks N > 1; `--tasks 4` is the issue's 16-episode quickstart batch).

    python bench/update.py [--tasks 1] [--repeats 2] [--turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import torch
from common import RESULTS, write_result

from pats.backends.local import training
from pats.backends.local.backend import LocalBackend
from pats.backends.local.policy import LocalPolicy
from pats.engine.run import make_env_factory
from pats.protocols import GroupPlan
from pats.spec import load_spec
from pats.types import EMPTY_VIEW

SPEC = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"


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
    args = parser.parse_args()

    spec = load_spec(SPEC, [] if args.turns is None else [f"environment.max_turns={args.turns}"])
    backend = LocalBackend(spec, make_env_factory(spec))
    stored = decisions(backend, args.tasks)
    asyncio.run(backend.close())
    top = spec.policy.model_copy(update={"lora": spec.policy.lora.model_copy(update={"top_layers": 8})})
    top_policy = LocalPolicy(top, spec.trainer, spec.seed)
    # name -> (policy, trainer.update_prefix_sharing)
    variants = {
        "per-decision": (backend.policy, False),
        "shared": (backend.policy, False),
        "shared+top8": (top_policy, False),
        "prefix": (backend.policy, True),
        "prefix+top8": (top_policy, True),
    }
    shared_units = training._units

    def run(name: str) -> float:
        items = [backend._train_item(s, adv, w) for s, adv, w in stored]
        policy, prefix_sharing = variants[name]
        policy.trainer = spec.trainer.model_copy(update={"update_prefix_sharing": prefix_sharing})
        if name == "per-decision":
            training._units = lambda batch, micro_batch: [[it] for it in batch]
        try:
            start = time.perf_counter()
            policy.update(items)
            return time.perf_counter() - start
        finally:
            training._units = shared_units

    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name in variants:
            seconds[name].append(run(name))
            print(f"  {name}: {seconds[name][-1]:.1f} s", flush=True)

    items = [backend._train_item(s, adv, w) for s, adv, w in stored]
    passes = len(shared_units(items, spec.trainer.micro_batch))
    groups = training._groups(items, spec.trainer.micro_batch, prefix_sharing=True)
    prompt_tokens = sum(len(it.prompt_ids) for it in items)
    median = {name: statistics.median(v) for name, v in seconds.items()}
    results = {
        "machine": f"{torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "decisions": len(items),
        "passes_shared": passes,
        "prefixes": len(groups),
        "prefix_tokens": [len(g.prefix) for g in groups],
        "passes_prefix": sum(len(g.units) for g in groups),
        "mean_prompt_tokens": prompt_tokens / len(items),
        "seconds": seconds,
        "median_s": median,
        "ratio_shared": median["shared"] / median["per-decision"],
        "ratio_shared_top8": median["shared+top8"] / median["per-decision"],
        "ratio_prefix": median["prefix"] / median["per-decision"],
        "ratio_prefix_top8": median["prefix+top8"] / median["per-decision"],
        "ratio_prefix_to_shared": median["prefix"] / median["shared"],
        "ratio_prefix_top8_to_shared_top8": median["prefix+top8"] / median["shared+top8"],
    }
    name = "update" if args.tasks == 1 else f"update_tasks{args.tasks}"
    out = write_result(name, {"episodes": 4 * args.tasks, **results}, RESULTS)
    print(f"wrote {out}")
    print(f"decisions: {len(items)}, passes when shared: {passes}")
    print(
        f"prefix sharing: {len(groups)} prefixes of {results['prefix_tokens']} tokens "
        f"(prompts {results['mean_prompt_tokens']:.0f} on average), {results['passes_prefix']} passes"
    )
    for name in variants:
        ratio = median[name] / median["per-decision"]
        print(f"{name}: median {median[name]:.1f} s  ({ratio:.2f}x of per-decision)")
    print(
        f"prefix / shared: {results['ratio_prefix_to_shared']:.2f}x, "
        f"prefix+top8 / shared+top8: {results['ratio_prefix_top8_to_shared_top8']:.2f}x"
    )


if __name__ == "__main__":
    main()
