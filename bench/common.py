"""What bench/perf and bench/studies share: the one module of helpers beside them.

- the conditions: spec files + dotted overrides, run through `pats run`'s entry points (its checks,
  then pats' own `train()`) in one run directory each; a finished run is skipped, an interrupted one
  resumed, so a long benchmark survives being stopped and started again with the same command;
- held-out evaluation of a run's last checkpoint through pats' `play_heldout` (what `pats eval`
  plays), kept per task: `pats eval` and the `eval` events keep only means, and a paired comparison
  needs each task;
- the cost model used to print an estimate before anything runs;
- `--set KEY=VALUE` spec overrides, shared by the benchmarks that take them: the flag, the name they
  give a result folder, and applying them to a spec the script built (pats' own loader validates them).
Statistics come from pats.stats (what `pats compare` uses), the reviser benchmark from pats.reviser.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

# name -> (spec file, extra overrides). Baselines are specs, not code forks (DESIGN.md).
CONDITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("experiments/baselines/grpo.yaml", ()),
    "static": ("experiments/baselines/static.yaml", ()),
    "grow": ("experiments/baselines/grow.yaml", ()),
    "pats": ("experiments/quickstart.yaml", ()),
    "no_removal": ("experiments/ablations/no_removal.yaml", ()),
    "no_outcome": ("experiments/ablations/no_outcome.yaml", ()),
    "no_contrast": ("experiments/ablations/no_contrast.yaml", ()),
    "no_failure": ("experiments/ablations/no_failure.yaml", ()),
    "no_utility": ("experiments/ablations/no_utility.yaml", ()),
}
BASELINES = ("none", "static", "grow")
ABLATIONS = ("no_removal", "no_outcome", "no_contrast", "no_failure", "no_utility")

# The issue's harder twc setting, offered by every benchmark as --setting hard.
SETTINGS: dict[str, tuple[str, ...]] = {
    # The setting every result in docs/results.md "Learning" ran on (the quickstart's until it moved
    # to one item); stated here so those benchmarks keep measuring the same games.
    "easy": ("environment.params.numItemsToPutAway=2",),
    "hard": ("environment.params.numLocations=2", "environment.params.numItemsToPutAway=3"),
}


# -- cost model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitCosts:
    """Seconds per unit on this project's 2-core CPU, measured alone with today's defaults (batched
    score-mode acting, prefix-shared update, bf16 weight copies; docs/results.md "Speed")."""

    # One score-mode policy turn of one episode: bench/results/rollout.json, groups.4.median.fast
    # (0.185 s per episode-turn, 12 episodes acting together, 2 threads).
    turn_s: float = 0.185
    # One trained decision, LoRA on all layers as the quickstart spec: bench/results/update_tasks4.json,
    # median_s.prefix 38.1 s / 121 decisions = 0.315 s (throughput.json's update: 28.5 s / 106 = 0.27 s;
    # with lora.top_layers=8, prefix+top8: 21.4 s / 121 = 0.18 s).
    decision_s: float = 0.315
    turns: float = 9.5  # turns per episode: most episodes fail and use all 10
    startup_s: float = 20.0  # per run: model from the cache, JVM, tokenizer, checkpoints


# Assumed share of groups that carry signal (only those are trained): the 20-step prototype saw
# 0.31 without a scaffold and 0.46 with one (facts.md); a guess, so the estimate is rough.
INFORMATIVE = {"none": 0.3, "static": 0.4, "grow": 0.4}
INFORMATIVE_DEFAULT = 0.45


def step_seconds(tasks: int, group: int, informative: float, max_turns: int, u: UnitCosts) -> float:
    turns = min(u.turns, max_turns)
    return tasks * group * turns * (u.turn_s + informative * u.decision_s)


def eval_seconds(episodes: int, max_turns: int, u: UnitCosts) -> float:
    return episodes * max_turns * u.turn_s  # greedy held-out episodes mostly fail: all turns


# -- runs -----------------------------------------------------------------------------------------


def read_run(run_dir: Path) -> dict:
    """Step metrics and evaluations from a run's events.jsonl (also of a run still going)."""
    from pats.logging.events import EvalEvent, StepEndEvent, read_events

    path = run_dir / "events.jsonl"
    if not path.is_file():
        return {"steps": [], "evals": []}
    return {
        "steps": [(e.step, e.metrics) for e in read_events(path, StepEndEvent)],
        "evals": [(e.step + 1, e.metrics) for e in read_events(path, EvalEvent)],  # x: steps done
    }


def finished(run_dir: Path, steps: int) -> bool:
    return any(s == steps - 1 for s, _ in read_run(run_dir)["steps"])


def run_condition(spec_file: str, overrides: Sequence[str], run_dir: Path) -> str:
    """Train one condition in run_dir through the entry points of `pats run` (`run_spec`, `resume`:
    the same checks before anything loads, then pats' own train()): 'skipped' when it already
    finished, 'resumed' after an interruption, 'ran' when started fresh."""
    from pats.engine.run import resume, run_spec
    from pats.spec import load_spec

    name = run_dir.name
    spec = load_spec(REPO / spec_file, [*overrides, f"name={name}", f"logging.root={run_dir.parent}"])
    if finished(run_dir, spec.trainer.steps):
        return "skipped"
    try:
        if (run_dir / "checkpoints" / "latest.json").is_file():
            resume(run_dir)
            return "resumed"
        shutil.rmtree(run_dir, ignore_errors=True)  # died before its first checkpoint: start over
        run_spec(spec)  # what `pats run` does: its checks (files, device, LLMs), then train()
        return "ran"
    finally:
        gc.collect()  # the next condition loads its own model


def heldout(
    cache: Path, num_tasks: int, run_dir: Path | None = None, base_spec=None, chunk: int = 32, offset: int = 0
) -> dict:
    """Per-task held-out outcomes without the scaffold of run_dir's last checkpoint, or of the
    untrained policy of base_spec when run_dir is None, on eval tasks [offset, offset + num_tasks),
    `chunk` tasks at a time: pats' own held-out evaluation (pats.engine.evaluate.play_heldout, what
    `pats eval` plays), kept per task. Cached in `cache` (redone if the checkpoint changed)."""
    from pats.engine.evaluate import play_heldout
    from pats.engine.run import check_policy_inputs, load_run

    spec, state = load_run(run_dir) if run_dir else (base_spec, None)
    if run_dir is None:  # a run's spec was checked when it started (run_condition)
        check_policy_inputs(spec)
    if offset:  # the i-th eval task is the fold's i-th seed whatever the count, so this only extends the list
        env_spec = spec.environment.model_copy(update={"num_eval_tasks": offset + num_tasks})
        spec = spec.model_copy(update={"environment": env_spec})
    step = state.step if state else -1
    if cache.is_file() and json.loads(cache.read_text())["checkpoint_step"] == step:
        return json.loads(cache.read_text())
    held = asyncio.run(play_heldout(spec, state, "eval", offset, num_tasks, chunk, say=lambda line: None))
    result = {
        "checkpoint_step": step,
        "tasks": [r.task_id for r in held.bare],
        "success": [float(r.success) for r in held.bare],
        "reward": [r.reward for r in held.bare],
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result) + "\n")
    return result


def untrained_heldout(spec_file: Path, seed: int, cache: Path, num_tasks: int, offset: int) -> dict:
    """The `heldout_record` of spec_file's untrained policy at `seed` (its sampling stream) on eval
    tasks [offset, offset + num_tasks), cached in `cache`: the reference a campaign's trained cells
    are measured against (same games, same seeds)."""
    from pats.spec import load_spec

    spec = load_spec(spec_file, [f"seed={seed}"])
    return heldout_record(heldout(cache, num_tasks, base_spec=spec, offset=offset))


def heldout_record(held: dict) -> dict:
    """A `heldout()` result as the cell files keep it: episodes, successes, and game -> outcomes."""
    per_task: dict[str, list[float]] = {}
    for task, success in zip(held["tasks"], held["success"], strict=True):
        per_task.setdefault(task, []).append(success)
    return {"episodes": len(held["success"]), "successes": sum(held["success"]), "per_task": per_task}


def add_action_flags(parser) -> None:
    """--action and --new-tokens, for the benchmarks that time either acting mode (`action_overrides`)."""
    parser.add_argument("--action", choices=["score", "generate"], default="score", help="policy.action")
    parser.add_argument("--new-tokens", type=int, default=16, help="generate mode: policy.max_new_tokens")


def action_overrides(args) -> list[str]:
    """The spec overrides of `add_action_flags`' flags (none for score mode, the spec's default)."""
    if args.action == "generate":
        return ["policy.action=generate", f"policy.max_new_tokens={args.new_tokens}"]
    return []


# -- spec overrides (--set) ----------------------------------------------------------------------


def add_set_flag(parser, help: str) -> None:
    """`--set KEY=VALUE ...`: dotted spec overrides as `pats run SPEC KEY=VALUE` takes them (repeatable,
    several after one flag); `help` says what they reach and where their results go."""
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help=help)


def overrides_key(overrides: Sequence[str]) -> str:
    """A folder-name part for overrides: each one's last key part and its value, letters and digits only,
    joined by '-' (trainer.lr=1e-5 -> lr1e5; policy.model=Qwen/Qwen2.5-1.5B-Instruct ->
    modelQwenQwen2515BInstruct)."""
    parts = []
    for text in overrides:
        key, _, value = text.partition("=")
        parts.append(re.sub(r"[^A-Za-z0-9_]+", "", key.split(".")[-1] + value))
    return "-".join(parts)


def with_overrides(spec, overrides: Sequence[str], owned: dict[str, str], what: str):
    """`spec` with `overrides` applied last, read and validated by pats' own loader (`load_spec`: the
    same parsing, merge and checks as `pats run SPEC KEY=VALUE`, so a bad key is refused with what to
    write). `owned` maps the keys the calling script sets itself (its flags and grid) to the flag to use
    instead: an override of one of them, or of a section holding one, is refused too, since the script
    would overwrite it or name its cells after another value. `what` names the overrides in errors."""
    from pats.errors import SpecError, SpecIssue
    from pats.spec import load_spec, spec_to_yaml

    if not overrides:
        return spec
    issues = []
    for text in overrides:
        key = text.partition("=")[0].strip()
        for mine, flag in owned.items():
            if key == mine or key.startswith(mine + "."):
                what_to_do = f"set by {flag}; use that instead"
            elif mine.startswith(key + "."):
                what_to_do = (
                    f"holds {mine}, set by {flag}; override the other keys one by one ({key}.<key>=...)"
                )
            else:
                continue
            issues.append(SpecIssue(key, what_to_do, f"override '{text}'"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(spec_to_yaml(spec))
        try:
            changed = load_spec(path, overrides)
        except SpecError as err:
            issues = [*err.issues, *issues]
    if issues:
        raise SpecError(issues, file=what)
    return changed


def write_result(name: str, result: dict, results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    out = results_dir / f"{name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    return out


def fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"
