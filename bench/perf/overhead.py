"""What the scaffold loop costs per training step: `pats` against `none` on the same rollouts.

Rollout groups of a few steps are recorded once (real LocalBackend episodes under the pats plans,
probes included), then replayed into pats' own Engine for each condition, so every condition trains
the very same groups with the same policy update and only the scaffold side differs:
- `none`: plain GRPO, nothing reviewed;
- `pats_rules`: the full loop with the offline rules reviser;
- `pats_llm`: the full loop with an LLM reviser behind a local OpenAI-compatible server
  (pats.testing.ScriptedOpenAIServer) that answers each call after --delay seconds (an empty edit
  set, valid in every mode). The engine runs the review beside the update, so the delay should hide
  behind the update; `time/review_overlap_s` shows how much of it did.
Conditions alternate, each run --repeats times; figures are medians over runs and steps. The ratio is
printed twice: for the step after the rollout (what the scaffold adds to; strict), and for the whole
step with the recorded rollout time added to both (the same rollouts cost the same).
Targets: pats/none <= 1.05x with the rules reviser, <= 1.10x with a 1 s LLM reviser.
Writes bench/results/overhead_<budget>.json.

    python bench/perf/overhead.py --budget small [--delay 1.0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, SETTINGS, UnitCosts, step_seconds, write_result  # noqa: E402

SPEC = REPO / "experiments" / "quickstart.yaml"
WIRE_EMPTY = "[[ ## edits ## ]]\n[]\n\n[[ ## completed ## ]]"  # DSPy's chat format: no edits
TARGETS = {"pats_rules": 1.05, "pats_llm": 1.10}


@dataclass(frozen=True)
class Budget:
    tasks_per_step: int
    group_size: int
    steps: int  # recorded steps, replayed by every run
    repeats: int
    max_turns: int = 10


BUDGETS = {
    "smoke": Budget(1, 4, 1, 1, max_turns=3),
    "small": Budget(2, 4, 2, 3),  # ~30 min on 2 cores
    "large": Budget(8, 8, 3, 3),
}


def estimate(b: Budget, u: UnitCosts, informative: float = 0.4) -> float:
    record = b.steps * step_seconds(b.tasks_per_step, b.group_size, 0.0, b.max_turns, u)
    update = b.steps * (
        step_seconds(b.tasks_per_step, b.group_size, informative, b.max_turns, u) - record / b.steps
    )
    return record + b.repeats * 3 * (update + u.startup_s)


def condition_overrides(name: str, base_url: str) -> list[str]:
    if name == "none":
        return ["scaffold.mode=none"]
    if name == "pats_rules":
        return []
    return [
        "reviser.kind=llm",
        "reviser.llm.model=openai/scripted",
        f"reviser.llm.api_base={base_url}",
        "reviser.llm.api_key_env=PATS_BENCH_KEY",
        "reviser.llm.timeout_s=30",
    ]


class ReplayBackend:
    """Serves recorded rollout groups with their played turns; the update is the real one."""

    def __init__(self, real, recorded):
        self.real, self.recorded = real, recorded

    async def rollout(self, step, plans):
        return self.recorded[step % len(self.recorded)]

    async def update(self, played):
        return await self.real.update(played)

    async def evaluate(self, tasks, views):
        return []

    def save(self, directory):
        self.real.save(directory)

    def load(self, directory):
        self.real.load(directory)

    async def close(self):
        await self.real.close()


async def measure(args, b: Budget, base: list[str], work: Path) -> dict:
    from pats.backends.local.backend import LocalBackend
    from pats.build import build_scaffold_policy
    from pats.engine.loop import Engine
    from pats.engine.run import check_policy_inputs, make_env_factory
    from pats.engine.sampler import TaskSampler
    from pats.logging.events import EventLog, StepEndEvent, read_events
    from pats.models import token_counter
    from pats.spec import load_spec
    from pats.testing import ScriptedOpenAIServer

    spec = load_spec(SPEC, base)
    make_env = make_env_factory(spec)
    env = make_env()
    train_tasks = env.tasks("train")
    types = sorted({t.type for t in train_tasks})
    count = token_counter(spec.policy.model)
    check_policy_inputs(spec)  # what `pats run` checks before a model loads
    backend = LocalBackend(spec, make_env)
    sampler = TaskSampler(train_tasks, b.tasks_per_step, spec.seed)
    recorder = build_scaffold_policy(spec, work / "record", count, env.expert_plan, task_types=types)
    recorded, rollout_s, informative = [], [], []
    for step in range(b.steps):  # the same draws as the learning benchmark's first steps
        t0 = time.perf_counter()
        played = await backend.rollout(
            step, recorder.plan(sampler.sample(step), b.group_size, spec.probe_count())
        )
        rollout_s.append(time.perf_counter() - t0)
        recorded.append(played)
        informative += [p.group.informative for p in played]
    print(
        f"recorded {b.steps} steps: rollout {statistics.median(rollout_s):.1f} s each, "
        f"{sum(informative)}/{len(informative)} groups with signal",
        flush=True,
    )
    if not any(informative):
        print("warning: no group has signal, so the update trains nothing; try --reward score", flush=True)
    times: dict[str, list[dict]] = {c: [] for c in ("none", "pats_rules", "pats_llm")}
    os.environ.setdefault("PATS_BENCH_KEY", "not-a-key")  # the local server ignores it
    script = [{"delay": args.delay, "text": WIRE_EMPTY}] * 10_000
    with ScriptedOpenAIServer(script) as server:
        order = list(times)
        for rep in range(b.repeats):
            for cond in order[rep % 3 :] + order[: rep % 3]:  # rotate who goes first
                cspec = load_spec(SPEC, [*base, *condition_overrides(cond, server.base_url)])
                run = work / f"{cond}-{rep}"
                engine = Engine(
                    spec=cspec,
                    backend=ReplayBackend(backend, recorded),
                    scaffold=build_scaffold_policy(
                        cspec, run / "scaffold", count, env.expert_plan, task_types=types
                    ),
                    sampler=sampler,
                    eval_tasks=[],
                    events=EventLog(run / "events.jsonl"),
                )
                await engine.run()
                engine.events.close()
                times[cond] += [e.metrics for e in read_events(run / "events.jsonl", StepEndEvent)]
                print(f"  {cond} run {rep}: step {times[cond][-1]['time/step_s']:.1f} s", flush=True)
        llm_calls = len(server.requests)
    await backend.close()
    await env.close()
    return {
        "rollout_s": statistics.median(rollout_s),
        "informative_groups": sum(informative),
        "groups": len(informative),
        "llm_calls": llm_calls,
        "steps": times,
    }


def summarize(raw: dict) -> dict:
    """Medians per condition and the ratios against none (pure: tested on synthetic numbers)."""
    med = {
        cond: {
            k: statistics.median(m[f"time/{k}"] for m in steps)
            for k in ("step_s", "update_s", "review_s", "review_overlap_s")
        }
        for cond, steps in raw["steps"].items()
        if steps
    }
    base = med["none"]["step_s"]
    ratios = {
        cond: {
            "after_rollout": m["step_s"] / base,
            "whole_step": (raw["rollout_s"] + m["step_s"]) / (raw["rollout_s"] + base),
            "target": TARGETS[cond],
        }
        for cond, m in med.items()
        if cond != "none"
    }
    return {"medians": med, "ratios": ratios}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="small")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="easy")
    parser.add_argument("--reward", choices=["win", "score"], default="win")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the LLM server waits per answer")
    parser.add_argument("--repeats", type=int, help="runs per condition (default: the budget's)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    b = BUDGETS[args.budget]
    if args.repeats:
        b = Budget(b.tasks_per_step, b.group_size, b.steps, args.repeats, b.max_turns)
    print(f"budget {args.budget}: {asdict(b)}; estimate {estimate(b, UnitCosts()) / 60:.0f} min", flush=True)
    base = [
        f"trainer.tasks_per_step={b.tasks_per_step}",
        f"trainer.group_size={b.group_size}",
        f"trainer.steps={b.steps}",
        f"environment.max_turns={b.max_turns}",
        f"environment.reward={args.reward}",
        f"eval.every={b.steps}",
        # one greedy evaluation at the end, as its results were measured (the quickstart now samples,
        # and evaluates before training too)
        "eval.at_start=false",
        "eval.greedy=true",
        "eval.samples_per_task=1",
        "eval.with_scaffold=false",
        "logging.wandb=disabled",
        *SETTINGS[args.setting],
    ]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        raw = asyncio.run(measure(args, b, base, Path(tmp)))
    result = summarize(raw)
    elapsed = time.perf_counter() - started
    key = args.budget + ("" if args.setting == "easy" else f"-{args.setting}")
    path = write_result(
        f"overhead_{key}",
        {
            "budget": key,
            "sizes": asdict(b),
            "delay_s": args.delay,
            "seconds": elapsed,
            **{k: v for k, v in raw.items() if k != "steps"},
            **result,
        },
        args.results,
    )
    print(
        f"rollout (recorded once, shared): {raw['rollout_s']:.1f} s; {raw['informative_groups']}/"
        f"{raw['groups']} groups trained; {raw['llm_calls']} LLM calls"
    )
    for cond, m in result["medians"].items():
        print(
            f"{cond}: step {m['step_s']:.2f} s (update {m['update_s']:.2f}, review {m['review_s']:.2f}, "
            f"review overlapped with the update {m['review_overlap_s']:.2f})"
        )
    for cond, r in result["ratios"].items():
        print(
            f"{cond}/none: {r['after_rollout']:.3f}x after the rollout, {r['whole_step']:.3f}x whole step "
            f"(target <= {r['target']}x)"
        )
    print(f"took {elapsed:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
