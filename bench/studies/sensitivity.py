"""How far can guidance move the untrained policy? No training: sampled play with each kind of guidance.

For each setting (a TextWorldExpress game and its parameters) and guidance kind, the untrained policy
plays the same probe tasks (`--tasks` games x `--samples` sampled episodes, the sampler reseeded per
cell, so every kind sees the same games and the same random stream) and the cell records:
- sampled success (its interval clustered by game: pats/stats.py) and, per task, its success rate p, from which the predicted
  informative-group fraction at group size G is the mean over tasks of 1 - p^G - (1-p)^G;
- the response-likelihood gap: along each probe task's verified expert plan, the mean NLL of the
  expert action (under the policy's own action distribution, softmax over the admissible actions)
  without guidance minus with it. Positive: the guidance makes the expert's actions more likely.

Guidance kinds (each rendered by the scaffold's own renderer, under the spec's view budget):
- none: the bare prompt (the evaluation prompt);
- expert: the task's own expert plan as a task-scoped plan, the text the rules reviser writes from the
  privileged expert card: an upper bound that cannot transfer;
- family: one type-scoped skill, the most common role-abstracted pattern (pats.reviser.abstract) of
  the verified expert plans of `--sources` *other* training tasks;
- rules: what the rules reviser writes at type scope (EXPAND) from the cards of the untrained policy's
  own groups (`--group` rollouts) on those other training tasks; no privileged information;
- control: unrelated text with the family card's token count, to separate "any text" from guidance.

Tasks: all from the training fold (probe tasks from index `--probe-offset`, sources from 0): the
held-out folds (dev, test) are never played here, so choosing a setting or a guidance kind with this
probe does not tune on held-out tasks.

Each (setting, kind) cell writes bench/results/sensitivity/<setting>-<kind>.json when it finishes;
a rerun skips finished cells. `--report-only` rebuilds bench/results/sensitivity.json and the table.

    python bench/studies/sensitivity.py --settings twc twc1 cookingworld   # docs/journal/2026-11-30-sensitivity.md
    python bench/studies/sensitivity.py --report-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, fmt  # noqa: E402
from pats.stats import hierarchical_difference, hierarchical_rate  # noqa: E402

CELLS = RESULTS / "sensitivity"
KINDS = ("none", "expert", "family", "rules", "control")
CONTROL_TEXT = (
    "Lighthouses were once kept by families who lived beside the lamp, trimming wicks and polishing "
    "lenses through long winter nights. Fresnel's stepped glass rings bent scattered light into one "
    "beam that ships could see from far out at sea, and many towers still stand on rocky capes, "
    "painted in bands of red and white so that sailors can tell one from another by day. Some were "
    "built on caissons sunk into sand bars, others on iron legs screwed into the seabed."
)


@dataclass(frozen=True)
class Setting:
    game: str
    params: dict
    max_turns: int


SETTINGS = {
    "twc": Setting("twc", {"numLocations": 1, "numItemsToPutAway": 2, "includeDoors": 0,
                           "limitInventorySize": 0}, 10),  # the quickstart's
    # One item to put away: the untrained policy wins more often, so groups can be informative.
    "twc1": Setting("twc", {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0,
                            "limitInventorySize": 0}, 10),
    "coin": Setting("coin", {"numLocations": 3, "includeDoors": 1, "numDistractorItems": 0}, 15),
    "cookingworld": Setting("cookingworld", {"numLocations": 1, "numIngredients": 1, "numDistractorItems": 0,
                                             "includeDoors": 0, "limitInventorySize": 0}, 15),
}  # fmt: skip


def setting_spec(name: str):
    """The quickstart spec with the setting's game, parameters and turn limit (sampled evaluation)."""
    from pats.spec import load_spec
    from pats.spec.models import ExperimentSpec

    s = SETTINGS[name]
    data = load_spec(REPO / "experiments" / "quickstart.yaml").model_dump()
    data["environment"].update(game=s.game, params=s.params, max_turns=s.max_turns)
    data["eval"].update(greedy=False, samples_per_task=1)
    return ExperimentSpec.model_validate(data)


def entry(kind: str, scope: str, text: str, tokens: int):
    from pats.types import ScaffoldEntry

    return ScaffoldEntry(
        id=f"probe-{kind}", kind=kind, scope=scope, text=text, tokens=tokens, created_step=0, updated_step=0
    )


def informative(p: float, g: int) -> float:
    return 1 - p**g - (1 - p) ** g


class Probe:
    def __init__(self, setting: str, args, spec=None):
        from pats.backends.local.backend import LocalBackend
        from pats.engine.run import check_policy_inputs, make_env_factory
        from pats.models import token_counter

        self.name, self.args = setting, args
        self.spec = spec or setting_spec(setting)  # bench/studies/stage0.py hands in variants of a setting
        check_policy_inputs(self.spec)  # `pats run`'s checks of files and device (no LLM plays here)
        self.make_env = make_env_factory(self.spec)
        self.env = self.make_env()
        train = self.env.tasks("train")
        self.probe_tasks = train[args.probe_offset : args.probe_offset + args.tasks]
        self.source_tasks = train[: args.sources]
        self.backend = LocalBackend(self.spec, self.make_env)
        self.count = token_counter(self.spec.policy.model)
        self.plans: dict[str, list[str]] = {}

    # -- guidance --------------------------------------------------------------------------------

    async def verified_plan(self, task) -> list[str] | None:
        """The task's expert plan if replaying it wins the game (else None)."""
        if task.id not in self.plans:
            state = await self.env.reset(task)
            plan = list(self.env.expert_plan(task) or [])
            won = False
            for action in plan:
                state = await self.env.step(action)
                won = won or state.won
            self.plans[task.id] = plan if won else []
        return self.plans[task.id] or None

    async def entries(self, kind: str) -> dict[str, list]:
        """task id -> the scaffold entries that task's prompt sees under this kind."""
        from pats.reviser.rules import key_actions

        t = self.spec.environment.game
        if kind == "none":
            return {task.id: [] for task in self.probe_tasks}
        if kind == "expert":
            out = {}
            for task in self.probe_tasks:
                plan = await self.verified_plan(task)
                text = "Steps to try: " + key_actions(plan) if plan else ""
                out[task.id] = [entry("plan", f"task:{task.id}", text, self.count(text))] if text else []
            return out
        if kind in ("family", "control"):
            family = await self.family_text()
            text = family if kind == "family" else self.control_text(self.count(family))
            return {
                task.id: [entry("skill", f"type:{t}", text, self.count(text))] for task in self.probe_tasks
            }
        if kind == "rules":
            shared = await self.rules_entries()
            return {task.id: shared for task in self.probe_tasks}
        raise ValueError(f"unknown guidance kind '{kind}'; known: {', '.join(KINDS)}")

    async def family_text(self) -> str:
        from pats.reviser.abstract import family_pattern
        from pats.reviser.rules import family_skill_text

        traces = [(s.id, p) for s in self.source_tasks if (p := await self.verified_plan(s))]
        found = family_pattern(traces)
        if found is None:
            raise RuntimeError(f"no verified expert plan among {len(self.source_tasks)} source tasks")
        return family_skill_text(self.spec.environment.game, *found, len(traces), won=0, plans=len(traces))

    def control_text(self, tokens: int) -> str:
        words = ((CONTROL_TEXT + " ") * 4).split()
        lo, hi = 1, len(words)
        while lo < hi:  # the longest prefix with at most `tokens` tokens
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.count(" ".join(words[:mid])) <= tokens else (lo, mid - 1)
        return " ".join(words[:lo])

    async def rules_entries(self) -> list:
        """The rules reviser's type-scoped ADDs (EXPAND) from the untrained policy's groups on the
        source tasks."""
        from pats.cards import build_cards
        from pats.reviser import RulesReviser
        from pats.types import AddEdit, Assessment, ReviewMode, RolloutGroup

        g = self.args.group
        self.reseed()
        rollouts = []
        for _ in range(g):
            rollouts += await self.backend.evaluate(self.source_tasks, self.empty(self.source_tasks))
        cards = []
        for task in self.source_tasks:
            mine = tuple(r.model_copy(update={"scaffolded": True}) for r in rollouts if r.task_id == task.id)
            group = RolloutGroup(step=0, task=task, scaffold_version="", rollouts=mine)
            cards += build_cards(group, ("outcome", "contrast", "failure"), self.count, 400)
        reviser = RulesReviser(removal=False, min_citations=2)
        t = self.spec.environment.game
        assessment = Assessment(task_type=t, mode=ReviewMode.EXPAND, ema_success=0.0, pressure=0.0)
        edits = await reviser.revise(0, assessment, cards, [])
        self.rules_wins = sum(r.success for r in rollouts)
        adds = [e for e in edits if isinstance(e, AddEdit) and e.scope == f"type:{t}"]
        return [entry(a.kind, a.scope, a.text, self.count(a.text)) for a in adds]

    # -- measuring -------------------------------------------------------------------------------

    def reseed(self) -> None:
        self.backend.policy.generator.manual_seed(self.spec.seed)

    def empty(self, tasks):
        from pats.types import EMPTY_VIEW

        return [EMPTY_VIEW] * len(tasks)

    def views(self, entries: dict[str, list]):
        from pats.scaffold.render import render_view

        budget = self.spec.scaffold.budget.view_tokens
        return [render_view(entries[t.id], t, self.count, budget, "probe") for t in self.probe_tasks]

    async def play(self, views) -> list:
        self.reseed()
        out = []
        for _ in range(self.args.samples):
            out += await self.backend.evaluate(self.probe_tasks, views)
        return out

    async def likelihood_gap(self, views) -> dict:
        """Mean NLL of the expert action without and with the view, over the probe tasks' expert
        (state, action) pairs whose task has guidance (the engine's `LikelihoodGap`)."""
        from pats.backends.local.reliance import LikelihoodGap, expert_pairs

        if not hasattr(self, "pairs"):
            self.pairs = await expert_pairs(self.env, self.probe_tasks)
        view_of = {t.id: v for t, v in zip(self.probe_tasks, views, strict=True)}
        pairs = [p for p in self.pairs if not view_of[p.task.id].empty]
        m = LikelihoodGap(self.backend, pairs).measure(lambda task: view_of[task.id], prefix="probe")
        if not m:
            return {"pairs": 0}
        return {
            "pairs": len(pairs),
            "nll_without": m["probe/expert_nll"],
            "nll_with": m["probe/expert_nll_with_scaffold"],
            "gap": m["probe/likelihood_gap"],
        }

    async def cell(self, kind: str) -> dict:
        start = time.time()
        entries = await self.entries(kind)
        views = self.views(entries)
        gap = await self.likelihood_gap(views)
        rollouts = await self.play(views)
        per_task: dict[str, list[float]] = {}
        for r in rollouts:
            per_task.setdefault(r.task_id, []).append(float(r.success))
        wins, n = sum(r.success for r in rollouts), len(rollouts)
        rates = [sum(v) / len(v) for v in per_task.values()]
        texts = sorted({v.text for v in views})
        return {
            "setting": self.name,
            "kind": kind,
            "game": self.spec.environment.game,
            "params": self.spec.environment.params,
            "max_turns": self.spec.environment.max_turns,
            "probe_tasks": [t.id for t in self.probe_tasks],
            "episodes": n,
            "successes": wins,
            "success": wins / n,
            "reward_mean": sum(r.reward for r in rollouts) / n,
            "turns_mean": sum(len(r.turns) for r in rollouts) / n,
            "per_task": per_task,
            "informative_g4": sum(informative(p, 4) for p in rates) / len(rates),
            "informative_g8": sum(informative(p, 8) for p in rates) / len(rates),
            "likelihood_gap": gap,
            "guidance_tokens": max((v.tokens for v in views), default=0),
            "guidance_examples": texts[:2],
            "rules_source_wins": getattr(self, "rules_wins", None) if kind == "rules" else None,
            "seconds": round(time.time() - start, 1),
        }

    async def close(self) -> None:
        await self.backend.close()
        await self.env.close()


def run(args) -> None:
    CELLS.mkdir(parents=True, exist_ok=True)
    for setting in args.settings:
        todo = [k for k in args.kinds if not (CELLS / f"{setting}-{k}.json").is_file()]
        if not todo:
            continue
        probe = Probe(setting, args)

        async def go(probe=probe, todo=todo, setting=setting):
            try:
                for kind in todo:
                    result = await probe.cell(kind)
                    (CELLS / f"{setting}-{kind}.json").write_text(json.dumps(result, indent=1) + "\n")
                    print(f"{setting:13s} {kind:8s} {result['successes']}/{result['episodes']} "
                          f"gap {fmt(result['likelihood_gap'].get('gap'))} ({result['seconds']} s)", flush=True)  # fmt: skip
            finally:
                await probe.close()

        asyncio.run(go())


def report() -> dict:
    cells = [json.loads(p.read_text()) for p in sorted(CELLS.glob("*.json"))]
    by = {(c["setting"], c["kind"]): c for c in cells}
    rows = ["| setting | guidance | success [95% CI, bootstrap over games; at 0 or 1 Wilson over games] | diff vs none [95% CI, paired bootstrap over games] | "
            "predicted informative G=4 / G=8 | likelihood gap (pairs) | guidance tokens |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (setting, kind), c in sorted(by.items(), key=lambda x: (x[0][0], KINDS.index(x[0][1]))):
        base = by.get((setting, "none"))
        diff = "n/a"
        if base is not None and kind != "none":  # one run: the bootstrap over seeds and games is over games
            diff = hierarchical_difference({0: c["per_task"]}, {0: base["per_task"]}).interval.fmt(
                signed=True
            )
        gap = c["likelihood_gap"]
        rate = hierarchical_rate({0: c["per_task"]})
        rows.append(
            f"| {setting} | {kind} | {rate.fmt()} ({c['successes']}/{c['episodes']}) "
            f"| {diff} | {c['informative_g4']:.2f} / {c['informative_g8']:.2f} "
            f"| {fmt(gap.get('gap'))} ({gap.get('pairs', 0)}) | {c['guidance_tokens']} |"
        )
    table = "\n".join(rows)
    (RESULTS / "sensitivity.json").write_text(json.dumps({"cells": cells, "table": table}, indent=1) + "\n")
    return {"table": table}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--settings",
        nargs="+",
        default=list(SETTINGS),
        choices=list(SETTINGS),
        help="games to probe (default: all)",
    )
    p.add_argument(
        "--kinds", nargs="+", default=list(KINDS), choices=KINDS, help="guidance kinds (default: all)"
    )
    p.add_argument("--tasks", type=int, default=16, help="probe tasks per setting (training fold)")
    p.add_argument("--samples", type=int, default=4, help="sampled episodes per probe task")
    p.add_argument(
        "--probe-offset", type=int, default=500, help="index of the first probe task in the train fold"
    )
    p.add_argument(
        "--sources", type=int, default=8, help="other training tasks the family and rules guidance come from"
    )
    p.add_argument("--group", type=int, default=4, help="rollouts per source task for the rules guidance")
    p.add_argument("--report-only", action="store_true", help="rebuild the table from the cell files")
    args = p.parse_args(argv)  # fmt: skip
    if not args.report_only:
        run(args)
    print(report()["table"])


if __name__ == "__main__":
    main()
