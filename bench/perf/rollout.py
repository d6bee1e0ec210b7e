"""Rollout speed: acting from cached system prompts (`trainer.rollout_batching: true`, the default)
against the older path, side by side in one process: score mode (the default) against one episode
at a time; `--action generate` against one batched `generate` over whole prompts.

Real quickstart rollouts (SmolLM2-135M, twc with the quickstart's parameters, `tasks_per_step` tasks
x a group size, up to 10 turns, no scaffold as at the first step), at group sizes 4 and 8. Each round
plays the same rollout on both paths, alternating, with the sampler reseeded, so both play the same
episodes (the choices agree except where bf16 rounding moves a draw across two actions; the share
of equal actions is reported). Reported: seconds per episode-turn, the median over --repeats
rounds, and the ratio fast/slow (target <= 0.5x). The fast path also scores identical decisions
once (a group's first turn). Then where the time goes: achieved GFLOP/s of the prompt pass
(distinct first-turn prompts; linear layers only, 2 x weights x tokens, padding included) on each
path, beside a bf16 matmul of the same row count (x 576 x 1536, SmolLM2's MLP) and at 2048^3.

In generate mode (`--new-tokens` per turn) the prompt-pass figures are not measured; the policy's
tokens per second are reported on both paths, and the share of equal turns.

The machine may be shared with other jobs: compare the ratios, not the seconds. Writes
bench/results/rollout.json (rollout_generate.json with --action generate).

    python bench/perf/rollout.py [--groups 4 8] [--repeats 2] [--threads N] [--action generate]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, action_overrides, add_action_flags, write_result
from bench.perf.flops import MODEL_SHAPE, best_seconds, linear_weights, matmul_gflops
from pats.backends.local import scoring
from pats.backends.local.backend import LocalBackend
from pats.engine.run import check_policy_inputs, make_env_factory
from pats.episode import Episode
from pats.protocols import GroupPlan
from pats.spec import load_spec
from pats.types import EMPTY_VIEW

SPEC = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def play(backend: LocalBackend, plans, batching: bool, seed: int) -> tuple[float, int, list, int]:
    """(seconds, episode-turns, actions, policy tokens) of one rollout on one path."""
    backend.policy.trainer = backend.policy.trainer.model_copy(update={"rollout_batching": batching})
    backend.policy.generator.manual_seed(seed)
    start = time.perf_counter()
    played = asyncio.run(backend.rollout(0, plans))
    seconds = time.perf_counter() - start
    turns = [t for p in played for r in p.group.rollouts for t in r.turns]
    return seconds, len(turns), [t.action for t in turns], sum(t.response_tokens for t in turns)


def prompt_pass(backend: LocalBackend, tasks) -> dict:
    """GFLOP/s of the prompt pass on the first-turn prompts of `tasks`: one batched pass over every
    prompt's user part and candidates (after the shared system prefix) vs one prompt at batch 1."""
    policy, env = backend.policy, backend.make_env()

    async def first_turns():
        out = []
        for task in tasks:
            ep = Episode("b", task, EMPTY_VIEW, state=await env.reset(task))
            actions = list(ep.current.admissible)
            out.append((policy.chat_split(*backend.prompt_parts(ep, actions)), actions))
        await env.close()
        return out

    turns = asyncio.run(first_turns())
    heads = [tuple(h) for (h, _), _ in turns]
    rests = [r for (_, r), _ in turns]
    cands = [[policy.action_ids(a) for a in acts] for _, acts in turns]
    weights = linear_weights(policy.model)
    store = scoring.PrefixStore()
    with torch.no_grad(), policy.autocast_context():

        def batched():  # the prefixes are in the store after the first call: the rest is timed
            scoring.score_batch(
                policy.model, store, heads, rests, cands,
                pad_id=policy.pad_id, chunk=policy.trainer.logprob_chunk, normalization="mean",
            )  # fmt: skip

        full = torch.tensor([list(heads[0]) + rests[0]])  # (1, P)
        one = best_seconds(lambda: policy.model.get_decoder()(input_ids=full))
        many = best_seconds(batched)
    lengths = list(map(scoring.packed_length, rests, cands))
    rows = max(lengths) * len(scoring.pack_rows(lengths, heads, max(lengths)))  # padding is computed too
    return {
        "episodes": len(rests),
        "batched_rows": rows,
        "batched_fill": sum(lengths) / rows,
        "batched_gflops": 2 * weights * rows / many / 1e9,
        "batch1_rows": full.shape[1],
        "batch1_gflops": 2 * weights * full.shape[1] / one / 1e9,
        "matmul_bf16_gflops_batched_rows": matmul_gflops(rows, *MODEL_SHAPE),
        "matmul_bf16_gflops_batch1_rows": matmul_gflops(full.shape[1], *MODEL_SHAPE),
        "matmul_bf16_gflops_2048": matmul_gflops(2048, 2048, 2048),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8], help="group sizes to measure")
    parser.add_argument("--repeats", type=int, default=2, help="rounds per group size (fast, slow each)")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed, the same on both paths")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch threads (default: the spec's, all cores); 1 is steadier beside another job",
    )  # fmt: skip
    add_action_flags(parser)
    args = parser.parse_args()

    overrides = [] if args.threads is None else [f"trainer.threads={args.threads}"]
    overrides += action_overrides(args)
    spec = load_spec(SPEC, overrides)
    make_env = make_env_factory(spec)
    check_policy_inputs(spec)  # what `pats run` checks before a model loads
    backend = LocalBackend(spec, make_env)
    tasks = make_env().tasks("train")[: spec.trainer.tasks_per_step]
    results: dict = {
        "machine": f"{torch.get_num_threads()} torch threads, torch {torch.__version__}; "
        "may be shared with other jobs (see the load averages)",
        "bf16_autocast": backend.policy.autocast,
        "load_average_at_start": os.getloadavg()[0],
        "action": args.action,
        "tasks": len(tasks),
        "groups": {},
    }
    try:
        for size in args.groups:
            plans = [GroupPlan(task=t, view=EMPTY_VIEW, size=size) for t in tasks]
            per_turn: dict[str, list[float]] = {"fast": [], "slow": []}
            tokens_per_s: dict[str, list[float]] = {"fast": [], "slow": []}
            agree = []
            for _ in range(args.repeats):
                actions = {}
                for name in ("fast", "slow"):
                    seconds, turns, actions[name], tokens = play(backend, plans, name == "fast", args.seed)
                    per_turn[name].append(seconds / turns)
                    tokens_per_s[name].append(tokens / seconds)
                    print(f"  group {size} {name}: {seconds:.1f} s, {turns} episode-turns", flush=True)
                same = sum(a == b for a, b in zip(actions["fast"], actions["slow"], strict=False))
                agree.append(same / max(len(actions["fast"]), len(actions["slow"])))
            median = {name: statistics.median(v) for name, v in per_turn.items()}
            results["groups"][str(size)] = {
                "episodes": size * len(tasks),
                "s_per_episode_turn": per_turn,
                "median": median,
                "ratio_fast_slow": median["fast"] / median["slow"],
                "same_actions": min(agree),
                "policy_tokens_per_s": {k: statistics.median(v) for k, v in tokens_per_s.items()},
            }
            rate = results["groups"][str(size)]["policy_tokens_per_s"]
            print(
                f"group {size} ({size * len(tasks)} episodes): fast {median['fast']:.3f} s vs slow "
                f"{median['slow']:.3f} s per episode-turn -> {median['fast'] / median['slow']:.2f}x"
                + (" (target <= 0.5x)" if args.action == "score" else "")
                + f"; same actions {min(agree):.0%}; policy tokens/s fast {rate['fast']:.0f}, "
                f"slow {rate['slow']:.0f}",
                flush=True,
            )
        if args.action == "score":  # distinct tasks: identical prompts would be scored once
            many = make_env().tasks("train")[: max(args.groups) * len(tasks)]
            results["prompt_pass"] = prompt_pass(backend, many)
    finally:
        asyncio.run(backend.close())
    results["load_average_at_end"] = os.getloadavg()[0]  # > ~2 on 2 cores: other jobs were running
    out = write_result("rollout" if args.action == "score" else "rollout_generate", results, RESULTS)
    if "prompt_pass" in results:
        report_prompt_pass(results["prompt_pass"])
    print(f"wrote {out}")


def report_prompt_pass(flops: dict) -> None:
    print(
        f"prompt pass, {flops['episodes']} first-turn prompts: batched {flops['batched_rows']} rows "
        f"{flops['batched_gflops']:.0f} GFLOP/s (bf16 matmul at that row count "
        f"{flops['matmul_bf16_gflops_batched_rows']:.0f}); batch 1 {flops['batch1_rows']} rows "
        f"{flops['batch1_gflops']:.0f} GFLOP/s (matmul {flops['matmul_bf16_gflops_batch1_rows']:.0f}); "
        f"bf16 matmul 2048^3 {flops['matmul_bf16_gflops_2048']:.0f} GFLOP/s"
    )


if __name__ == "__main__":
    main()
