"""How many tokens one turn of each environment adds to an episode: what a verl episode (one growing
chat) must hold per turn besides the policy's own output.

For each shipped environment spec, `--tasks` training tasks are played along their expert plans; each
turn's user message (the observation and, where listed, the admissible actions, rendered as both
backends render it) is counted with the embedded SmolLM2 tokenizer, a proxy for the specs' Qwen
tokenizers (no download here; Qwen's vocabulary is larger, so its counts would be lower, not higher).
Writes bench/results/turn_tokens.json: per environment the median, 90th percentile and maximum
tokens per turn, and the turns of the expert plans. `pats.spec` reads the 90th percentiles
(`ENV_TURN_TOKENS`) to refuse verl specs whose episodes cannot fit.

    python bench/perf/turn_tokens.py [--tasks 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, write_result
from pats.engine.run import make_env_factory
from pats.envs.prompting import render_prompt
from pats.models import token_counter
from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
SPECS = {
    "twx": "experiments/quickstart.yaml",
    "alfworld": "experiments/alfworld/local.yaml",
    "webshop": "experiments/webshop/demo.yaml",
    "search_qa": "experiments/search_qa/pats.yaml",
}


async def turns(kind: str, tasks: int, count) -> tuple[list[int], list[int]]:
    """(tokens of every turn's user message, turns per expert episode) over `tasks` training tasks."""
    spec = load_spec(REPO / SPECS[kind])
    env = make_env_factory(spec)()
    sizes, lengths = [], []
    try:
        for task in env.tasks("train")[:tasks]:
            plan = env.expert_plan(task) or []
            state = await env.reset(task)
            for action in [None, *plan]:
                if action is not None:
                    state = await env.step(action)
                    if state.done:
                        break
                listed = None if env.parses_output else list(state.admissible) or None
                sizes.append(count(render_prompt("", "", (), state.observation, listed, 0).user))
            lengths.append(len(plan))
    finally:
        await env.close()
    return sizes, lengths


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=8, help="training tasks per environment")
    parser.add_argument("--kinds", nargs="+", default=list(SPECS), choices=list(SPECS))
    args = parser.parse_args()
    count = token_counter("smollm2-135m-instruct")
    results: dict = {"tokenizer": "smollm2-135m-instruct (proxy)", "tasks": args.tasks, "kinds": {}}
    for kind in args.kinds:
        sizes, lengths = asyncio.run(turns(kind, args.tasks, count))
        ordered = sorted(sizes)
        row = {
            "turns_measured": len(sizes),
            "median": statistics.median(ordered),
            "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "max": ordered[-1],
            "expert_turns": lengths,
        }
        results["kinds"][kind] = row
        print(f"{kind}: {row['median']:.0f} tokens per turn (p90 {row['p90']}, max {row['max']}), "
              f"expert episodes {min(lengths)}-{max(lengths)} turns", flush=True)  # fmt: skip
    print(f"wrote {write_result('turn_tokens', results, RESULTS)}")


if __name__ == "__main__":
    main()
