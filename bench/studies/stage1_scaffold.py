"""What did Stage 1's scaffold give the policy, and was plain GRPO starved where the cells trained?
Issue 58's reading of the nine committed Stage 1 cells, every number recomputed from them (no play;
of the model only its tokenizer, to re-render what each group was shown).

The cells are read as pats reads them: events through `pats.logging.events.read_events`, held-out
outcomes through `pats.compare.runs.read_run` (what `pats compare` resamples), and each rollout
group's view re-rendered by the cell's own `ScaffoldStore.pin` at the version the group pinned, under
the spec's view token budget, with the policy's tokenizer (checked against the token counts stored in
the versions; and every entry shown whole, as Stage 1's renderer showed them). A group's probes are its first `probe_count()` rollouts (LocalBackend.rollout).

1. plans: the expert plans the rules reviser wrote in the pats-expert cells (plan entries whose text
   starts "Steps to try: "), how many groups were shown one and what they hold, against each pool
   game's whole expert path (the expert card's plan);
2. following: in the pats-expert cells, rollouts whose first action was "look around" (the expert
   card's `followed` count is at least 1, every pool game's expert plan starting with it), split into
   scaffolded rollouts and probes of groups shown an expert plan and of the other groups, over all
   steps and the last third; with their success;
3. labels: each type skill "How <type> games were won (x of y won games ...)" against how many of the
   games in the review that wrote it had a won episode, and how many the run had won so far;
4. contradictions: a view that holds a mistake quoting an action and a plan prescribing it (strict:
   "Do not repeat 'X'" beside a plan whose first step is X; broad: any quoted action without a role
   placeholder, of a repeat or cycle mistake, that is any step of a plan), per scaffold version (the
   type's entries with each task's own) and per group (the view it pinned);
5. regime: informative groups (rewards not all equal), how often a pool game won at one occurrence
   was won at its next one, held-out success without the scaffold, and the per-game held-out success
   correlation between conditions (Pearson over the 64 games, each game's rate pooled over seeds; the
   per-seed values beside it).

    python bench/studies/stage1_scaffold.py
    python bench/studies/stage1_scaffold.py --cells bench/results/sweeps/stage1 --out /tmp/read.json

Writes bench/results/sweeps/stage1/scaffold_read.json (and prints a summary).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import correlation, fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS  # noqa: E402
from pats.cards.failures import normalize_action  # noqa: E402
from pats.compare.runs import condition_of, read_run  # noqa: E402
from pats.logging.events import CardEvent, EditEvent, GroupsEvent, read_events  # noqa: E402
from pats.reviser.rules import MISTAKES  # noqa: E402
from pats.scaffold.render import plan_steps  # noqa: E402
from pats.scaffold.store import ScaffoldStore  # noqa: E402
from pats.spec import load_spec  # noqa: E402
from pats.types import AddEdit, ExpertData, ScaffoldEntry, ScaffoldVersion, Task  # noqa: E402

CELLS = RESULTS / "sweeps" / "stage1"
EXPERT_PLAN = "Steps to try: "  # the label of plans from the expert card (pats.reviser.rules._expert_plan)
LOOK = "look around"
LABEL = re.compile(r"How \S+ games were won \((\d+) of (\d+) won games")  # rules.family_skill_text
# The mistakes that quote actions, as regexes of the rules reviser's own templates.
QUOTING = {
    kind: re.compile(re.escape(MISTAKES[kind]).replace(re.escape("{x}"), "(.+?)"))
    for kind in ("repeated_action", "loop")
}


@dataclass(frozen=True)
class Group:
    step: int
    task: str
    rewards: tuple[float, ...]  # probes first
    view: tuple[ScaffoldEntry, ...]  # the entries its pinned view rendered (none: the empty view)
    expert: ExpertData | None  # its expert card's facts, where the cell had the card


@dataclass(frozen=True)
class Cell:
    condition: str
    seed: int
    probes: int  # the first rollouts of each group, run without the scaffold
    steps: int
    groups: tuple[Group, ...]  # in step order
    edits: tuple[EditEvent, ...]
    versions: tuple[ScaffoldVersion, ...]  # every scaffold version after the empty one
    heldout: dict[str, tuple[float, ...]]  # game -> episodes won, without the scaffold, after training
    at_start: dict[str, tuple[float, ...]]  # the same before training (in the none cells)


def load_cell(run_dir: Path, count_tokens: Callable[[str], int]) -> Cell:
    spec, run = load_spec(run_dir / "spec.yaml"), read_run(run_dir)
    events = run_dir / "events.jsonl"
    store = ScaffoldStore.open(run_dir / "scaffold", count_tokens, spec.scaffold.budget.view_tokens)
    miscounted = [e.id for v in store.versions() for e in v.entries if e.tokens != count_tokens(e.text)]
    if miscounted:
        raise SystemExit(f"{run_dir}: the token counter disagrees with the stored entries {miscounted[:5]}; "
                         "re-render with the policy's own tokenizer (pats.models.token_counter)")  # fmt: skip
    experts = {
        (e.step, e.card.task_id): e.card.data
        for e in read_events(events, CardEvent)
        if isinstance(e.card.data, ExpertData)
    }
    groups = []
    for event in read_events(events, GroupsEvent):
        for g in event.groups:
            view: tuple[ScaffoldEntry, ...] = ()
            if g.version:
                # A view depends on the task's id and type only (ScaffoldStore.pin): the pool's games.
                task = Task(id=g.task, type=g.type, split="train", env=spec.environment.kind)
                entries = {e.id: e for e in store.version(g.version).entries}
                pinned = store.pin(task, g.version)
                view = tuple(entries[i] for i in pinned.entry_ids)
                # Stage 1's renderer showed entries whole or not at all; a later one that shortens
                # an entry to fit would not re-render what these groups saw.
                if any(" ".join(e.text.split()) not in pinned.text for e in view):
                    raise SystemExit(f"{run_dir}: step {event.step}'s view for {g.task} shows an entry cut; "
                                     "read the cells with the pats commit that ran them (2026-12-06)")  # fmt: skip
            groups.append(Group(event.step, g.task, g.rewards, view, experts.get((event.step, g.task))))
    return Cell(
        condition=condition_of(spec.name, spec.seed),
        seed=spec.seed,
        probes=spec.probe_count(),
        steps=spec.trainer.steps,
        groups=tuple(groups),
        edits=tuple(read_events(events, EditEvent)),
        versions=tuple(store.versions()[1:]),
        heldout=run.heldout,  # as pats compare reads them
        at_start=run.at_start,
    )


def share(flags: Sequence[bool | float]) -> dict:
    return {"n": len(flags), "share": round(fmean(flags), 4) if flags else None}


def won(rewards: Sequence[float]) -> bool:
    return any(r > 0 for r in rewards)


def informative(group: Group) -> bool:
    """Rewards not all equal: the groups GRPO learns from (RolloutGroup.informative)."""
    return len(set(group.rewards)) > 1


def expert_plan(group: Group) -> tuple[str, ...] | None:
    """The steps of the expert plan the group's view showed, if it showed one."""
    for e in group.view:
        if e.kind == "plan" and e.text.startswith(EXPERT_PLAN) and (steps := plan_steps(e.text)):
            return steps.steps
    return None


# -- 1. the expert plans ---------------------------------------------------------------------------


def plans(cells: Sequence[Cell]) -> dict:
    written = [e.edit.text for c in cells for e in c.edits
               if isinstance(e.edit, AddEdit) and e.edit.text.startswith(EXPERT_PLAN)]  # fmt: skip
    shown = [(p, g) for c in cells for g in c.groups if (p := expert_plan(g)) is not None]
    whole = {g.task: len(g.expert.plan) for c in cells for g in c.groups if g.expert is not None}
    return {
        "written": len(written),
        "distinct_written": len(set(written)),
        "groups": len(shown),
        "of_groups": sum(len(c.groups) for c in cells),
        "distinct_shown": len({p for p, _ in shown}),
        "steps_mean": round(fmean(len(p) for p, _ in shown), 3),
        "look_around_first": share([p[0] == LOOK for p, _ in shown]),
        "any_put": share([any(s.startswith("put ") for s in p) for p, _ in shown]),
        "whole_path": {
            "games": len(whole),
            "steps": dict(sorted(Counter(whole.values()).items())),
            "mean": round(fmean(whole.values()), 3),
        },
    }


# -- 2. whether the policy followed the line ---------------------------------------------------------


def following(cells: Sequence[Cell]) -> dict:
    """First action "look around" and success, by window, kind of group and side of the group."""
    out: dict = {}
    last_third = cells[0].steps * 2 // 3
    for window, first in (("all steps", 0), (f"steps {last_third}-{cells[0].steps - 1}", last_third)):
        rows: dict[tuple[str, str], tuple[list[bool], list[float]]] = {}
        for c in cells:
            for g in c.groups:
                if g.step < first or g.expert is None or normalize_action(g.expert.plan[0]) != LOOK:
                    continue
                kind = "expert plan shown" if expert_plan(g) else "no expert plan"
                # The card's rollouts are the group's, in order: probes first.
                for i, (followed, reward) in enumerate(
                    zip(g.expert.followed.values(), g.rewards, strict=True)
                ):
                    looks, wins = rows.setdefault(
                        (kind, "probes" if i < c.probes else "scaffolded"), ([], [])
                    )
                    looks.append(followed >= 1)
                    wins.append(reward)
        out[window] = {f"{kind}, {side}": {"look_around_first": share(looks), "won": share(wins)}
                       for (kind, side), (looks, wins) in sorted(rows.items())}  # fmt: skip
    return out


# -- 3. what the type skill's label counts -----------------------------------------------------------


def labels(cells: Sequence[Cell]) -> list[dict]:
    out = []
    for c in cells:
        for e in c.edits:
            found = LABEL.match(e.edit.text) if isinstance(e.edit, AddEdit) else None
            if found is None:
                continue
            review = [g for g in c.groups if g.step == e.step]
            so_far = {g.task for g in c.groups if g.step <= e.step and won(g.rewards)}
            out.append({
                "cell": f"{c.condition}-s{c.seed}",
                "step": e.step,
                "label": found.group(0).split("(")[1],
                "games_called_won": int(found.group(2)),
                "games_in_review_won": sum(won(g.rewards) for g in review),
                "games_won_so_far": len(so_far),
            })  # fmt: skip
    return out


# -- 4. entries that contradict each other -----------------------------------------------------------


def contradictions(entries: Sequence[ScaffoldEntry]) -> dict[str, int]:
    """How many (mistake, plan) pairs of these entries conflict, strictly and broadly (module doc)."""
    plan_lists = [p.steps for e in entries if e.kind == "plan" and (p := plan_steps(e.text))]
    strict = broad = 0
    for e in entries:
        if e.kind != "mistake":
            continue
        for kind, pattern in QUOTING.items():
            if (found := pattern.match(e.text)) is None:
                continue
            quoted = found.group(1).split(" | ") if kind == "loop" else [found.group(1)]
            actions = {normalize_action(a) for a in quoted if "<" not in a}
            for steps in plan_lists:
                said = [normalize_action(s) for s in steps]
                strict += kind == "repeated_action" and said[0] in actions
                broad += bool(actions & set(said))
    return {"strict": strict, "broad": broad}


def conflicts(cell: Cell) -> dict:
    pairs = {"strict": 0, "broad": 0}
    versions = {"strict": 0, "broad": 0}
    for v in cell.versions:
        shared = [e for e in v.entries if not e.scope.startswith("task:")]
        hit = {"strict": False, "broad": False}
        for scope in sorted({e.scope for e in v.entries if e.scope.startswith("task:")}):
            found = contradictions(shared + [e for e in v.entries if e.scope == scope])
            for k in pairs:
                pairs[k] += found[k] > 0
                hit[k] = hit[k] or found[k] > 0
        for k in versions:
            versions[k] += hit[k]
    found_in_groups = [contradictions(g.view) for g in cell.groups]
    return {
        "versions": len(cell.versions),
        "versions_with": versions,
        "version_task_pairs_with": pairs,
        "groups": len(cell.groups),
        "groups_with": {k: sum(f[k] > 0 for f in found_in_groups) for k in pairs},
    }


# -- 5. the regime -------------------------------------------------------------------------------------


def recurrence(groups: Sequence[Group]) -> dict:
    """Each occurrence of a pool game followed by a later one: the later one's success, split by whether
    the earlier one had a won episode; and all episodes of a game after its first win."""
    by_game: dict[str, list[Group]] = {}
    for g in sorted(groups, key=lambda g: g.step):
        by_game.setdefault(g.task, []).append(g)
    after_win: list[float] = []
    after_loss: list[float] = []
    after_first_win: list[float] = []
    for seen in by_game.values():
        for before, after in itertools.pairwise(seen):
            (after_win if won(before.rewards) else after_loss).extend(after.rewards)
        first = next((i for i, g in enumerate(seen) if won(g.rewards)), None)
        if first is not None:
            after_first_win += [r for g in seen[first + 1 :] for r in g.rewards]
    return {
        "next_after_a_win": share(after_win),
        "next_after_no_win": share(after_loss),
        "after_first_win": share(after_first_win),
    }


def regime(cells: Sequence[Cell]) -> dict:
    by_cell = {
        f"{c.condition}-s{c.seed}": {
            "all steps": share([informative(g) for g in c.groups]),
            "step 0": share([informative(g) for g in c.groups if g.step == 0]),
        }
        for c in cells
    }
    none = [c for c in cells if c.condition.endswith("none")]
    conditions = sorted({c.condition for c in cells})
    games = sorted(none[0].heldout)
    per_game = {  # condition -> seed -> game -> rate
        cond: {c.seed: {k: fmean(c.heldout[k]) for k in games} for c in cells if c.condition == cond}
        for cond in conditions
    }
    pooled = {
        cond: [fmean(x for c in cells if c.condition == cond for x in c.heldout[k]) for k in games]
        for cond in conditions
    }
    seeds = sorted(per_game[conditions[0]])
    return {
        "informative": by_cell,
        "none informative, all steps": share([informative(g) for c in none for g in c.groups]),
        "none informative, step 0": share([informative(g) for c in none for g in c.groups if g.step == 0]),
        # At step 0 every cell plays the untrained policy with the empty view: one regime, nine cells.
        "every cell informative, step 0": share(
            [informative(g) for c in cells for g in c.groups if g.step == 0]
        ),
        "recurrence": {f"{c.condition}-s{c.seed}": recurrence(c.groups) for c in cells},
        "heldout": {
            cond: {
                "pooled": round(fmean(pooled[cond]), 4),
                "per seed": [round(fmean(per_game[cond][s].values()), 4) for s in seeds],
                "games won at least once": sum(r > 0 for r in pooled[cond]),
            }
            for cond in conditions
        }
        | {"untrained": round(fmean(x for c in none for v in c.at_start.values() for x in v), 4)},
        "correlation, games pooled over seeds": {
            f"{a} ~ {b}": round(correlation(pooled[a], pooled[b]), 3)
            for a, b in itertools.combinations(conditions, 2)
        },
        "correlation, per seed": {
            f"{a} ~ {b}": [
                round(correlation(list(per_game[a][s].values()), list(per_game[b][s].values())), 3)
                for s in seeds
            ]
            for a, b in itertools.combinations(conditions, 2)
        },  # fmt: skip
        "correlation, none's seeds with each other": [
            round(
                correlation(
                    list(per_game[none[0].condition][s].values()),
                    list(per_game[none[0].condition][t].values()),
                ),
                3,
            )
            for s, t in itertools.combinations(seeds, 2)
        ],  # fmt: skip
    }


def read(cells_dir: Path, count_tokens: Callable[[str], int]) -> dict:
    from pats.compare.runs import run_dirs

    cells = [load_cell(d, count_tokens) for d in run_dirs([cells_dir])]
    expert = [c for c in cells if c.condition.endswith("pats-expert")]
    scaffolded = [c for c in cells if not c.condition.endswith("none")]
    return {
        "cells": [f"{c.condition}-s{c.seed}" for c in cells],
        "plans": plans(expert),
        "following": following(expert),
        "labels": labels(scaffolded),
        "contradictions": {f"{c.condition}-s{c.seed}": conflicts(c) for c in scaffolded},
        "regime": regime(cells),
    }


def summary(r: dict) -> str:
    """The headline numbers, one line a section; the JSON holds every count behind them."""
    p, g = r["plans"], r["regime"]
    last = list(r["following"])[-1]
    shown = r["following"][last]
    none = [v for k, v in g["recurrence"].items() if k.startswith("stage1-none-")]
    lines = [
        f"1. expert plans: {p['distinct_written']} distinct written ({p['written']} ADDs); {p['distinct_shown']} "
        f"distinct shown to {p['groups']} of {p['of_groups']} groups, {p['steps_mean']} steps on average, "
        f"'look around' first {p['look_around_first']['share']}, any put {p['any_put']['share']}; "
        f"whole expert paths (steps: games) {p['whole_path']['steps']}",
        f"2. {last}, groups shown an expert plan: 'look around' first in "
        f"{shown['expert plan shown, scaffolded']['look_around_first']['share']} of scaffolded rollouts, "
        f"{shown['expert plan shown, probes']['look_around_first']['share']} of probes; scaffolded success "
        f"over all steps {r['following']['all steps']['expert plan shown, scaffolded']['won']['share']}",
        "3. labels (games called won / won in the review): "
        + ", ".join(f"{x['cell'][7:]}@{x['step']} {x['games_called_won']}/{x['games_in_review_won']}" for x in r["labels"]),
        "4. groups whose view held a contradiction (strict/broad): "
        + ", ".join(f"{k[7:]} {v['groups_with']['strict']}/{v['groups_with']['broad']}" for k, v in r["contradictions"].items()),
        f"5. none informative {g['none informative, all steps']}, at step 0 {g['none informative, step 0']} "
        f"(every cell at step 0 {g['every cell informative, step 0']}); none's next occurrence after a win "
        f"{[x['next_after_a_win']['share'] for x in none]}, after none {[x['next_after_no_win']['share'] for x in none]}",
        f"   held-out {g['heldout']}",
        f"   correlation pooled over seeds {g['correlation, games pooled over seeds']}; per seed {g['correlation, per seed']}",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> None:
    from pats.models import token_counter

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--cells", type=Path, default=CELLS, help="the Stage 1 sweep folder")
    p.add_argument("--out", type=Path, default=CELLS / "scaffold_read.json", help="where the JSON goes")
    args = p.parse_args(argv)
    model = load_spec(next(args.cells.glob("*/spec.yaml"))).policy.model
    result = read(args.cells, token_counter(model))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(summary(result))


if __name__ == "__main__":
    main()
