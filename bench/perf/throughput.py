"""Local backend speed, measured side by side in one process (the machine is shared and noisy).

Prints three ratios against the issue's targets:
- generate mode: policy tokens/s of pats' batched episode turn vs raw batched `model.generate` on
  the same prompts (left-padded, under plain bf16 autocast where pats uses it: what a user would
  write; target >= 0.8x);
- score mode: one turn's action choice vs one forward pass of the same prompt (target <= 2x);
- one GRPO update on 16 score-mode episodes of the quickstart size (target < 60 s).
Each timing is the median of --repeats runs, alternating the two sides. Writes bench/results/throughput.json.

    python bench/perf/throughput.py [--repeats 3] [--batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, write_result
from pats.backends.local.backend import LocalBackend
from pats.backends.local.policy import left_padded, up_to_eos
from pats.engine.run import check_policy_inputs, make_env_factory
from pats.episode import Episode
from pats.protocols import GroupPlan
from pats.spec import load_spec
from pats.types import EMPTY_VIEW

SPEC = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def timed(fn):
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def first_prompts(backend: LocalBackend, make_env, n: int):
    """The first-turn prompts (ids) and admissible actions of n training tasks."""
    env = make_env()

    async def go():
        out = []
        for task in env.tasks("train")[:n]:
            state = await env.reset(task)
            ep = Episode("b", task, EMPTY_VIEW, state=state)
            out.append((backend.prompt_ids(ep, list(state.admissible)), list(state.admissible)))
        await env.close()
        return out

    return asyncio.run(go())


@torch.no_grad()
def raw_generate(policy, prompts, new_tokens: int) -> list[list[int]]:
    """HF `model.generate` on left-padded prompts, sampling as pats does, under plain autocast."""
    ids, mask = left_padded(prompts, policy.pad_id)
    with policy.autocast_context():
        out = policy.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
            temperature=policy.spec.temperature, top_p=policy.spec.top_p, top_k=0,
            eos_token_id=policy.eos_id, pad_token_id=policy.pad_id,
        )  # fmt: skip
    return [up_to_eos(row, policy.eos_id) for row in out[:, ids.shape[1] :].tolist()]


def bench_generate(args, results):
    spec = load_spec(
        SPEC,
        ["policy.action=generate", "environment.max_turns=1", f"policy.max_new_tokens={args.new_tokens}"],
    )
    make_env = make_env_factory(spec)
    check_policy_inputs(spec)  # what `pats run` checks before a model loads
    backend = LocalBackend(spec, make_env)
    policy = backend.policy
    prompts = [p for p, _ in first_prompts(backend, make_env, args.batch)]
    tasks = make_env().tasks("train")[: args.batch]
    raw_t, pats_t, raw_tok, pats_tok = [], [], [], []
    plans = [GroupPlan(task=t, view=EMPTY_VIEW, size=1) for t in tasks]
    for _ in range(args.repeats):
        seconds, out = timed(lambda: raw_generate(policy, prompts, args.new_tokens))
        raw_t.append(seconds)
        raw_tok.append(sum(len(r) for r in out))
        seconds, played = timed(lambda: asyncio.run(backend.rollout(0, plans)))
        pats_t.append(seconds)
        pats_tok.append(sum(r.response_tokens for p in played for r in p.group.rollouts))
    asyncio.run(backend.close())
    raw_rate = statistics.median(raw_tok) / statistics.median(raw_t)
    pats_rate = statistics.median(pats_tok) / statistics.median(pats_t)
    results["generate"] = {
        "raw_tokens_per_s": raw_rate,
        "pats_tokens_per_s": pats_rate,
        "ratio": pats_rate / raw_rate,
        "target": ">= 0.8",
    }
    print(
        f"generate: pats {pats_rate:.1f} tok/s vs raw model.generate {raw_rate:.1f} tok/s "
        f"-> {pats_rate / raw_rate:.2f}x (target >= 0.8x; batch {args.batch}, {args.new_tokens} new tokens)"
    )
    return backend


def bench_score(args, results):
    spec = load_spec(SPEC)
    make_env = make_env_factory(spec)
    check_policy_inputs(spec)  # what `pats run` checks before a model loads
    backend = LocalBackend(spec, make_env)
    policy = backend.policy
    prompt, actions = first_prompts(backend, make_env, 1)[0]
    ids = torch.tensor([prompt])
    fwd, choose = [], []
    for _ in range(args.repeats):
        with torch.no_grad(), policy.autocast_context():
            fwd.append(timed(lambda: policy.model(input_ids=ids))[0])
        choose.append(timed(lambda: policy.choose(prompt, actions, greedy=False))[0])
    ratio = statistics.median(choose) / statistics.median(fwd)
    results["score"] = {
        "forward_s": statistics.median(fwd),
        "choose_s": statistics.median(choose),
        "prompt_tokens": len(prompt),
        "candidates": len(actions),
        "ratio": ratio,
        "target": "<= 2",
    }
    print(
        f"score: choose among {len(actions)} actions {statistics.median(choose):.3f} s vs one forward of the "
        f"{len(prompt)}-token prompt {statistics.median(fwd):.3f} s -> {ratio:.2f}x (target <= 2x)"
    )
    return backend


def bench_update(args, results, backend: LocalBackend):
    """16 episodes of the quickstart: 4 tasks x 4 rollouts, 10 turns, every item with an advantage."""
    env_tasks = make_env_factory(backend.spec)().tasks("train")[:4]
    plans = [GroupPlan(task=t, view=EMPTY_VIEW, size=4) for t in env_tasks]
    items = []
    for played in asyncio.run(backend.rollout(0, plans)):
        for i, stored in enumerate(played.training):
            items += [
                backend.train_item(s, advantage=1.0 if i % 2 else -1.0, weight=1 / len(stored))
                for s in stored
            ]
    seconds, _ = timed(lambda: backend.policy.update(items))
    results["update"] = {"episodes": 16, "decisions": len(items), "seconds": seconds, "target_s": 60}
    print(
        f"update: one GRPO step on 16 episodes ({len(items)} decisions) took {seconds:.1f} s (target < 60 s)"
    )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="prompts per generate batch")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    results: dict = {"machine": f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"}
    bench_generate(args, results)
    backend = bench_score(args, results)
    bench_update(args, results, backend)
    asyncio.run(backend.close())
    out = write_result("throughput", results, RESULTS)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
