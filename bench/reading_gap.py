"""The "Next action" line's likelihood gap on games a warm start did not clone, without playing any episode.

Issue 42, item 2: does a warm start's adapter read the line, or did it memorise the games it cloned? For
a `pats warm-start` output folder (`--warm-start DIR`: its adapter and LoRA shape) or the untrained
policy (no flag), over the expert decisions of a set of training-fold games, it measures the NLL of the
expert action without the line and with it (the game's own verified plan, shown as "Next action:
<step>") and their difference, the gap. It is Stage 0's expert-cell quantity with Stage 0's code (the
probe of bench/sensitivity.py, pats' `LikelihoodGap`: softmax over the admissible actions at the
policy temperature, one decision at a time), at the settings of Stage 0 pick A (bench/stage0.py
`variant_spec`: temperature 1.0, placement turn, `scaffold.plan_view=next policy.score_normalization=sum`).
Game sets (`--games`), each from its own first index (`--first`, `--count` games):
- twc: training games 600-631, the games Stage 0 pick A played (the warm starts clone cookingworld);
- cookingworld: the reading warm start's own cloning environment (`warm_start.environment` of
  experiments/warm_start/twc_reading_from_cookingworld.yaml), training games 64-95: a warm start
  clones the first `warm_start.num_tasks` (64) training games (pats/warm_start.py), so none of these;
  a warm start that cloned another environment, or more games than `--first`, is refused.

Each (adapter, game set) writes bench/results/reading_gap/<warm start name or untrained>-<set><first>-<last>.json
(extra `--set` overrides add their `-<key><value>` part) with the pooled NLLs (Stage 0's numbers) and
every decision's NLLs per game; an existing file is skipped. Then the table of every file in the
folder (also `summary.md`) and, per game set, each pair of adapters' difference of gaps with its 95%
interval resampling games (pats.stats.paired_bootstrap over the per-decision gaps: the pooled gap of
the resampled games). A decision past the plan's shown steps (pats.reviser.rules.MAX_PLAN_ACTIONS)
shows no line, so its gap is 0 for every adapter.

    python bench/reading_gap.py --threads 1
    python bench/reading_gap.py --threads 1 --warm-start bench/results/warm_start/twc_reading_from_cookingworld
    python bench/reading_gap.py --report-only
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, add_set_flag, fmt, overrides_key  # noqa: E402
from stage0 import variant_spec  # noqa: E402
from stats import paired_bootstrap  # noqa: E402

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


async def measure(spec, first: int, count: int) -> dict:
    """Pooled and per-decision NLLs of the expert action without and with the line, per game."""
    from sensitivity import Probe

    from pats.backends.local.reliance import LikelihoodGap, expert_pairs
    from pats.types import EMPTY_VIEW

    probe = Probe(
        spec.environment.game, SimpleNamespace(probe_offset=first, tasks=count, sources=0), spec=spec
    )
    try:
        views = {
            t.id: v
            for t, v in zip(probe.probe_tasks, probe.views(await probe.entries("expert")), strict=True)
        }
        pairs = [p for p in await expert_pairs(probe.env, probe.probe_tasks) if not views[p.task.id].empty]
        gap = LikelihoodGap(probe.backend, pairs)
        without = gap.nll([EMPTY_VIEW] * len(pairs))
        with_ = gap.nll([views[p.task.id] for p in pairs])
    finally:
        await probe.close()
    per_task: dict[str, dict[str, list[float]]] = {}
    for p, a, b in zip(pairs, without, with_, strict=True):
        per_task.setdefault(p.task.id, {"without": [], "with": []})
        per_task[p.task.id]["without"].append(a)
        per_task[p.task.id]["with"].append(b)
    n = len(pairs)
    return {
        "probe_tasks": [t.id for t in probe.probe_tasks],
        "games": len(per_task),  # those whose expert plan wins when replayed
        "pairs": n,
        "nll_without": sum(without) / n if n else None,
        "nll_with": sum(with_) / n if n else None,
        "gap": (sum(without) - sum(with_)) / n if n else None,
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
              f"({fmt(result['nll_without'])} -> {fmt(result['nll_with'])}), {result['seconds']} s", flush=True)  # fmt: skip


def decision_gaps(result: dict) -> dict[str, list[float]]:
    """game -> each decision's gap (NLL without minus with the line)."""
    return {
        t: [a - b for a, b in zip(d["without"], d["with"], strict=True)]
        for t, d in result["per_task"].items()
    }


def report(folder: Path = FOLDER) -> str:
    """The table of every result in `folder` and, per game set, each pair of adapters' difference of
    gaps (earlier in ORDER minus later) with its 95% interval over games; also written to summary.md."""
    results = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    rank = {n: i for i, n in enumerate(ORDER)}

    def key(r: dict):
        return r["game_set"], r["probe_tasks"][0], rank.get(r["adapter"], len(ORDER)), r["adapter"]

    results.sort(key=key)
    rows = ["| game set | games | adapter | decisions | NLL without | NLL with | gap |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in results:
        games = f"{r['probe_tasks'][0].rsplit(':', 1)[1]}-{r['probe_tasks'][-1].rsplit(':', 1)[1]} ({r['games']} with a plan)"
        rows.append(f"| {r['game_set']} | {games} | {r['adapter']} | {r['pairs']} | {fmt(r['nll_without'])} "
                    f"| {fmt(r['nll_with'])} | {fmt(r['gap'])} |")  # fmt: skip
    diffs = [
        "",
        "| game set | difference of gaps | [95% CI, paired bootstrap over games] |",
        "| --- | --- | --- |",
    ]
    for (games, _), group in itertools.groupby(results, key=lambda r: key(r)[:2]):
        for a, b in itertools.combinations(list(group), 2):
            d, lo, hi = paired_bootstrap(decision_gaps(a), decision_gaps(b))
            diffs.append(f"| {games} | {a['adapter']} - {b['adapter']} | {d:+.3f} [{lo:+.3f}, {hi:+.3f}] |")
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
