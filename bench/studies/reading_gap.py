"""Does a warm start's adapter read the "Next action" line, or did it memorise the games it cloned? The
line's likelihood gap on games the warm start did not clone, without playing any episode.

Issue 42, item 2. For a `pats warm-start` output folder (`--warm-start DIR`: its adapter and LoRA shape) or the untrained
policy (no flag), over the expert decisions of a set of training-fold games, it measures the NLL of the
expert action without the line and with it (the game's own verified plan, shown as "Next action:
<step>") and their difference, the gap. It is Stage 0's expert-cell quantity with Stage 0's code (the
probe of bench/studies/sensitivity.py; pats' `action_distributions`, which `LikelihoodGap` reads: softmax
over the admissible actions at the policy temperature, one decision at a time), at the settings of
Stage 0 pick A (bench/studies/stage0.py `variant_spec`: temperature 1.0, placement turn,
`scaffold.plan_view=next policy.score_normalization=sum`).

The expert's action is also what a policy that knows the game picks without any line, so its gap
shrinks as the adapter learns the game family, whether or not it reads. Hence a second measure, the
warm start's necessary examples on unseen games: at every decision where the line can name another
admissible action not yet taken (pats.warm_start.necessary_targets at fraction 1, the target drawn with
the spec's seed), the NLL of that action without the line and with the plan swapped at that step so
that the line names it ("named": only reading can lower it).

Game sets (`--games`), each from its own first index (`--first`, `--count` games):
- twc: training games 600-631, the games Stage 0 pick A played (the warm starts clone cookingworld);
- cookingworld: the reading warm start's own cloning environment (`warm_start.environment` of
  experiments/warm_start/twc_reading_from_cookingworld.yaml), training games 64-95: a warm start
  clones the first `warm_start.num_tasks` (64) training games (pats/warm_start.py), so none of these;
  a warm start that cloned another environment, or more games than `--first`, is refused.

Each (adapter, game set) writes bench/results/reading_gap/<warm start name or untrained>-<set><first>-<last>.json
(extra `--set` overrides add their `-<key><value>` part) with the pooled NLLs and gaps and every
decision's values per game; an existing file is skipped. Then the table of every file in the folder
(also `summary.md`) and, per game set, each pair of adapters' differences of gaps with their 95%
intervals resampling games (pats.stats.paired_bootstrap over the per-decision gaps: the pooled gap of
the resampled games). A decision past the plan's shown steps (pats.reviser.rules.MAX_PLAN_ACTIONS)
shows no line, so its expert gap is 0 for every adapter, and it has no named target.

    python bench/studies/reading_gap.py --threads 1
    python bench/studies/reading_gap.py --threads 1 --warm-start bench/results/warm_start/twc_reading_from_cookingworld
    python bench/studies/reading_gap.py --report-only
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, add_set_flag, fmt, overrides_key  # noqa: E402
from bench.studies.stage0 import variant_spec  # noqa: E402
from pats.stats import paired_bootstrap  # noqa: E402

FOLDER = RESULTS / "reading_gap"
PICK_A = ("scaffold.plan_view=next", "policy.score_normalization=sum")  # Stage 0 pick A, at 1.0, turn
TEMPERATURE, PLACEMENT = 1.0, "turn"
READING = REPO / "experiments" / "warm_start" / "twc_reading_from_cookingworld.yaml"
GAME_SETS = {"twc": 600, "cookingworld": 64}  # set -> its default first training-fold index
ORDER = ("twc_reading_from_cookingworld", "twc_reading_control", "untrained")  # differences: earlier - later


def cloned_environment() -> tuple[dict, int]:
    """The reading warm start's cloning environment (resolved) and how many of its games it clones."""
    from pats.spec import load_spec

    ws = load_spec(READING).warm_start
    assert ws is not None, f"{READING} has a warm_start section"
    return ws.environment.model_dump(mode="json"), ws.num_tasks


def gap_spec(games: str, first: int, threads: int | None, warm: Path | None, extra: tuple[str, ...] = ()):
    """Stage 0 pick A's probe spec (from the warm start's adapter where given); for cookingworld, with
    the reading warm start's cloning environment, refusing a warm start that cloned other games or
    any of those from `first` on."""
    import yaml

    from pats.spec.models import ExperimentSpec

    spec = variant_spec("twc", TEMPERATURE, PLACEMENT, threads, warm, (*PICK_A, *extra))
    if games == "twc":
        return spec
    environment, cloned = cloned_environment()
    if warm is not None:
        ws = yaml.safe_load((warm / "spec.yaml").read_text()).get("warm_start") or {}
        if ws.get("environment") != environment:
            raise SystemExit(f"{warm}: the warm start cloned {ws.get('environment')}, not {environment}")
        cloned = ws["num_tasks"]
    if first < cloned:
        raise SystemExit(
            f"--first {first}: the warm start cloned training games 0-{cloned - 1}; start at {cloned}"
        )
    return ExperimentSpec.model_validate(spec.model_dump(mode="json") | {"environment": environment})


def result_path(folder: Path, name: str, games: str, first: int, count: int, extra) -> Path:
    tail = f"-{overrides_key(extra)}" if extra else ""
    return folder / f"{name}-{games}{first}-{first + count - 1}{tail}.json"


def swapped_view(probe, task, plan: list[str], turn: int, target: str):
    """The task's plan view (as Stage 0's expert guidance renders it) with step `turn` swapped for `target`."""
    from bench.studies.sensitivity import entry
    from pats.reviser.rules import key_actions
    from pats.scaffold.render import render_view

    text = "Steps to try: " + key_actions([*plan[:turn], target, *plan[turn + 1 :]])
    budget = probe.spec.scaffold.budget.view_tokens
    return render_view(
        [entry("plan", f"task:{task.id}", text, probe.count(text))], task, probe.count, budget, "probe"
    )


async def measure(spec, first: int, count: int) -> dict:
    """Per game, each expert decision's NLL of the expert action without and with the line, and, where
    the line can name another admissible action not yet taken (pats.warm_start.necessary_targets, every
    eligible decision, drawn with the spec's seed), that action's NLL without the line and with a line
    naming it."""
    from bench.studies.sensitivity import Probe
    from pats.backends.local.reliance import action_distributions, action_nll, expert_pairs
    from pats.episode import Episode
    from pats.scaffold.render import NEXT_LINE
    from pats.types import EMPTY_VIEW
    from pats.warm_start import necessary_targets

    probe = Probe(
        spec.environment.game, SimpleNamespace(probe_offset=first, tasks=count, sources=0), spec=spec
    )
    try:
        rendered = probe.views(await probe.entries("expert"))
        views = dict(zip((t.id for t in probe.probe_tasks), rendered, strict=True))
        pairs = [p for p in await expert_pairs(probe.env, probe.probe_tasks) if not views[p.task.id].empty]
        targets = necessary_targets(pairs, {p.task.id for p in pairs}, 1.0, spec.seed)
        swapped = {i: swapped_view(probe, pairs[i].task, probe.plans[pairs[i].task.id], len(pairs[i].history), a)
                   for i, a in targets.items()}  # fmt: skip
        for i, view in list(swapped.items()):  # the line must name the target (a plan cut short may not)
            ep = Episode("check", pairs[i].task, view, state=pairs[i].state, history=list(pairs[i].history))
            user = probe.backend.prompt_parts(ep, list(pairs[i].state.admissible))[1]
            if NEXT_LINE.format(step=targets[i]) not in user:
                del swapped[i], targets[i]
        order = sorted(swapped)
        without = action_distributions(probe.backend, pairs, [EMPTY_VIEW] * len(pairs))
        with_ = action_distributions(probe.backend, pairs, [views[p.task.id] for p in pairs])
        named = dict(zip(order, action_distributions(probe.backend, [pairs[i] for i in order],
                                                     [swapped[i] for i in order]), strict=True))  # fmt: skip
    finally:
        await probe.close()
    per_task: dict[str, dict[str, list]] = {}
    for i, p in enumerate(pairs):
        index = list(p.state.admissible).index
        game = per_task.setdefault(p.task.id, {k: [] for k in DECISION_KEYS})
        game["without"].append(action_nll(without[i], index(p.action)))
        game["with"].append(action_nll(with_[i], index(p.action)))
        target = targets.get(i)
        game["target"].append(target)
        game["target_without"].append(action_nll(without[i], index(target)) if target else None)
        game["target_with"].append(action_nll(named[i], index(target)) if target else None)
    return {"probe_tasks": [t.id for t in probe.probe_tasks],
            "games": len(per_task)} | pooled(per_task)  # fmt: skip


DECISION_KEYS = ("without", "with", "target", "target_without", "target_with")


def pooled(per_task: dict[str, dict[str, list]]) -> dict:
    """The pooled NLLs and gaps (means over decisions): of the expert action, and of the other action
    a line names (`named_*`), over the decisions that have one; and every decision's values per game."""

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    games = per_task.values()
    a = [x for g in games for x in g["without"]]
    b = [x for g in games for x in g["with"]]
    c = [x for g in games for x in g["target_without"] if x is not None]
    d = [x for g in games for x in g["target_with"] if x is not None]
    return {
        "pairs": len(a),
        "nll_without": mean(a),
        "nll_with": mean(b),
        "gap": mean([x - y for x, y in zip(a, b, strict=True)]),
        "named_pairs": len(c),
        "named_nll_without": mean(c),
        "named_nll_with": mean(d),
        "named_gap": mean([x - y for x, y in zip(c, d, strict=True)]),
        "per_task": per_task,
    }


def run(args) -> None:
    name = args.name
    for games in args.games:
        first = args.first if args.first is not None else GAME_SETS[games]
        path = result_path(args.out, name, games, first, args.count, args.set)
        if path.is_file():
            print(f"{path.name}: there already; skipped", flush=True)
            continue
        spec = gap_spec(games, first, args.threads, args.warm_start, tuple(args.set))
        start = time.time()
        result = asyncio.run(measure(spec, first, args.count))
        result = {
            "adapter": name,
            "warm_start": str(args.warm_start) if args.warm_start else None,
            "game_set": games,
            "game": spec.environment.game,
            "params": spec.environment.params,
            "set": [*PICK_A, *args.set],
            "temperature": TEMPERATURE,
            "placement": PLACEMENT,
            **result,
            "seconds": round(time.time() - start, 1),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{path.name}: gap {fmt(result['gap'])} over {result['pairs']} decisions "
              f"({fmt(result['nll_without'])} -> {fmt(result['nll_with'])}); a line naming another action: "
              f"{fmt(result['named_gap'])} over {result['named_pairs']} "
              f"({fmt(result['named_nll_without'])} -> {fmt(result['named_nll_with'])}), {result['seconds']} s", flush=True)  # fmt: skip


def decision_gaps(result: dict, named: bool = False) -> dict[str, list[float]]:
    """game -> each decision's gap (NLL without minus with the line) of the expert action, or (`named`)
    of the other action a line names, over the decisions that have one."""
    keys = ("target_without", "target_with") if named else ("without", "with")
    return {
        t: [a - b for a, b in zip(d[keys[0]], d[keys[1]], strict=True) if a is not None]
        for t, d in result["per_task"].items()
    }


def report(folder: Path = FOLDER) -> str:
    """The table of every result in `folder` and, per game set, each pair of adapters' differences of
    gaps (earlier in ORDER minus later; the expert line's and the other-action line's) with their 95%
    intervals over games; also written to summary.md."""
    results = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    rank = {n: i for i, n in enumerate(ORDER)}

    def key(r: dict):
        return r["game_set"], r["probe_tasks"][0], rank.get(r["adapter"], len(ORDER)), r["adapter"]

    def nlls(r: dict, part: str = "") -> str:
        return f"{r[part + 'pairs']} | {fmt(r[part + 'nll_without'])} -> {fmt(r[part + 'nll_with'])} | {fmt(r[part + 'gap'])}"

    results.sort(key=key)
    rows = ["| game set | games | adapter | line names the expert action: decisions | NLL without -> with | gap "
            "| line names another action: decisions | its NLL without -> with | gap |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in results:
        first, last = (r["probe_tasks"][i].rsplit(":", 1)[1] for i in (0, -1))
        rows.append(f"| {r['game_set']} | {first}-{last} ({r['games']} with a plan) | {r['adapter']} "
                    f"| {nlls(r)} | {nlls(r, 'named_')} |")  # fmt: skip
    diffs = ["", "| game set | difference of gaps | expert line [95% CI, paired bootstrap over games] "
             "| other-action line [95% CI] |", "| --- | --- | --- | --- |"]  # fmt: skip
    for (games, _), group in itertools.groupby(results, key=lambda r: key(r)[:2]):
        for a, b in itertools.combinations(list(group), 2):
            shown = []
            for named in (False, True):
                d, lo, hi = paired_bootstrap(decision_gaps(a, named), decision_gaps(b, named))
                shown.append(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            diffs.append(f"| {games} | {a['adapter']} - {b['adapter']} | {' | '.join(shown)} |")
    table = "\n".join(rows + (diffs if len(diffs) > 3 else []))
    if results:
        (folder / "summary.md").write_text(table + "\n")
    return table


def main(argv=None) -> None:
    import yaml

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--warm-start", type=Path, default=None, metavar="DIR",
                   help="a `pats warm-start` output folder (its adapter/ and spec.yaml); none: the untrained policy")  # fmt: skip
    p.add_argument("--games", nargs="+", default=list(GAME_SETS), choices=list(GAME_SETS),
                   help="game sets to measure (default: both)")  # fmt: skip
    p.add_argument("--first", type=int, default=None,
                   help="first training-fold game (default: twc 600, cookingworld 64)")  # fmt: skip
    p.add_argument("--count", type=int, default=32, help="games per set")
    p.add_argument("--threads", type=int, default=None, help="torch threads (1 on a shared machine)")
    p.add_argument(
        "--out", type=Path, default=FOLDER, help="result folder (default: bench/results/reading_gap)"
    )
    add_set_flag(
        p, "extra spec overrides after pick A's (e.g. policy.model=DIR in tests); they name the file"
    )
    p.add_argument("--report-only", action="store_true", help="the table from the result files")
    args = p.parse_args(argv)
    if not args.report_only:
        if args.warm_start is not None and not (args.warm_start / "adapter").is_dir():
            p.error(
                f"--warm-start {args.warm_start}: no adapter/ there; give the folder `pats warm-start SPEC` wrote"
            )
        args.name = (
            yaml.safe_load((args.warm_start / "spec.yaml").read_text())["name"]
            if args.warm_start
            else "untrained"
        )
        run(args)
    print(report(args.out))


if __name__ == "__main__":
    main()
