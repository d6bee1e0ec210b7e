"""Ceiling probe, likelihood part (issue 34, item 3): how far can the task's own expert plan move the
untrained policy's choice of the expert's actions, under each plan view and each scoring rule?

No training and no play. On the recorded expert states of Stage 0's training-fold probe games (twc,
games 500-515, each game's verified expert plan replayed: bench/studies/sensitivity.py's `expert_pairs`),
every decision is scored with the guidance in the turn (`scaffold.placement: turn`):
- none: the bare prompt;
- expert, under each `scaffold.plan_view` (static, progress, next): the game's own plan as the rules
  reviser writes it from the expert card ("Steps to try: a -> b -> ..."), shown as that view shows it
  at that state (the steps before it taken);
- control, under each view: unrelated text (bench/studies/sensitivity.py's) with the token count of the expert
  guidance shown at that state under that view, in the same place: "any text of this length".
Each prompt runs once: every scoring rule (`policy.score_normalization`: mean, sum, distinct_mean,
pmi) is computed from the same token log-probs (pats.backends.local.scoring.rule_scores), pmi's
neutral premise once per distinct action, and each temperature (1.0, 0.5) only rescales the scores.

Per (view, rule, temperature): the mean NLL of the expert action (softmax over the admissible
actions) without guidance, with the expert plan, with the control; the likelihood gap (none - expert)
and expert over control (control - expert), each with a 95% interval resampling games (paired). The
combinations for play cells are picked by the rule stated in bench/results/ceiling/PLAN.md before
this ran (`pick`). Writes bench/results/ceiling/{pairs.json, summary.md, picks.json}.

    python bench/studies/ceiling.py --threads 1
    python bench/studies/ceiling.py --report-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS  # noqa: E402
from pats.backends.local.scoring import Normalization  # noqa: E402
from pats.stats import paired_bootstrap  # noqa: E402

OUT = RESULTS / "ceiling"
VIEWS = ("static", "progress", "next")
RULES: tuple[Normalization, ...] = get_args(Normalization)  # mean, sum, distinct_mean, pmi
TEMPERATURES = (1.0, 0.5)
# The rule that picks the play cells (bench/results/ceiling/PLAN.md, committed before the cells ran).
PICK = {"gap_min": 0.2, "over_control_min": 0.1}
PICK_TOP = 3


async def measure(args) -> dict:
    import torch

    from bench.studies.sensitivity import Probe
    from bench.studies.stage0 import variant_spec
    from pats.backends.local.backend import LocalBackend
    from pats.backends.local.grpo import sequence_score
    from pats.backends.local.reliance import expert_pairs
    from pats.backends.local.scoring import PrefixStore, batch_logprobs, rule_scores
    from pats.episode import Episode
    from pats.scaffold.render import place
    from pats.types import EMPTY_VIEW, ScaffoldView

    spec = variant_spec("twc", 1.0, "turn", args.threads)  # the temperature is applied below, per cell
    probe = Probe("twc", args, spec=spec)
    policy = probe.backend.policy
    try:
        pairs = await expert_pairs(probe.env, probe.probe_tasks)
        expert_views = dict(zip([t.id for t in probe.probe_tasks], probe.views(await probe.entries("expert")),
                                strict=True))  # fmt: skip
    finally:
        await probe.close()
    pairs = [p for p in pairs if not expert_views[p.task.id].empty]

    def backend(view: str) -> LocalBackend:
        scaffold = spec.scaffold.model_copy(update={"plan_view": view})
        return LocalBackend(spec.model_copy(update={"scaffold": scaffold}), probe.make_env, policy=policy)

    backends = {v: backend(v) for v in VIEWS}
    kinds = ["none", *(f"{k}-{v}" for v in VIEWS for k in ("expert", "control"))]

    def decisions(pair) -> tuple[dict, list[tuple[list[int], list[int]]]]:
        """(the pair's record, its prompts as (system prefix, rest) in `kinds` order, then its premise)."""
        actions = list(pair.state.admissible)

        def ep(shown: ScaffoldView) -> Episode:
            return Episode("ceiling", pair.task, shown, state=pair.state, history=list(pair.history))

        row = {
            "task": pair.task.id,
            "action": pair.action,
            "candidates": len(actions),
            "turn": len(pair.history),
        }
        prompts = [policy.chat_split(*backends["static"].prompt_parts(ep(EMPTY_VIEW), actions))]
        view, taken = expert_views[pair.task.id], [a for a, _ in pair.history]
        for v in VIEWS:
            guidance = place(view, "turn", v, taken)[1]
            tokens = probe.count(guidance)
            control = ScaffoldView(version="control", text=probe.control_text(tokens), tokens=tokens)
            prompts.append(policy.chat_split(*backends[v].prompt_parts(ep(view), actions)))
            prompts.append(policy.chat_split(*backends["static"].prompt_parts(ep(control), actions)))
            row[f"tokens-{v}"] = tokens
        cands = [policy.action_ids(a) for a in actions]
        return row, [*prompts, ([], policy.premise_ids(cands))]

    rows, start = [], time.time()
    for task in probe.probe_tasks:  # one game's decisions per packed batch: they share its system prompt
        mine = [p for p in pairs if p.task.id == task.id]
        if not mine:
            continue
        built = [decisions(p) for p in mine]
        flat = [d for _, ds in built for d in ds]
        per = len(kinds) + 1
        cands = [[policy.action_ids(a) for a in p.state.admissible] for p in mine for _ in range(per)]
        with torch.no_grad(), policy.acting_context():
            tables = batch_logprobs(policy.model, PrefixStore(), [h for h, _ in flat], [r for _, r in flat], cands,
                                    pad_id=policy.pad_id, chunk=policy.trainer.logprob_chunk)  # fmt: skip
        for n, (pair, (row, _)) in enumerate(zip(mine, built, strict=True)):
            own, c = tables[n * per : (n + 1) * per], cands[n * per]
            neutral = sequence_score(own[-1][0].float(), own[-1][1], "sum")  # after the premise
            expert = list(pair.state.admissible).index(pair.action)
            for kind, (table, mask) in zip(kinds, own[:-1], strict=True):
                row[kind] = {}
                for rule in RULES:
                    scores = rule_scores(table.float(), mask, c, rule, neutral).double()
                    row[kind][rule] = {
                        str(t): -float(torch.log_softmax(scores / t, dim=-1)[expert]) for t in TEMPERATURES
                    }
            rows.append(row)
        print(f"{task.id}: {len(mine)} decisions, {len(rows)}/{len(pairs)} done ({time.time() - start:.0f} s)",
              flush=True)  # fmt: skip
    return {
        "setting": "twc",
        "probe_tasks": [t.id for t in probe.probe_tasks],
        "placement": "turn",
        "model": spec.policy.model,
        "neutral_premise": "the turn's last line alone (LocalPolicy.premise_ids)",
        "pairs": rows,
        "seconds": round(time.time() - start, 1),
    }


def per_task(rows: list[dict], kind: str, rule: str, t: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r["task"], []).append(r[kind][rule][str(t)])
    return out


def cells(rows: list[dict]) -> list[dict]:
    """One record per (view, rule, temperature): mean NLLs and the two differences with intervals."""
    out = []
    for view in VIEWS:
        for rule in RULES:
            for t in TEMPERATURES:
                none, expert, control = (per_task(rows, k, rule, t) for k in ("none", f"expert-{view}", f"control-{view}"))  # fmt: skip
                mean = lambda d: sum(map(sum, d.values())) / sum(map(len, d.values()))  # noqa: E731
                gap = paired_bootstrap(none, expert)  # none - expert: positive when the plan helps
                over = paired_bootstrap(control, expert)  # control - expert: the plan beats any text
                out.append({
                    "view": view, "rule": rule, "temperature": t,
                    "nll_none": mean(none), "nll_expert": mean(expert), "nll_control": mean(control),
                    "gap": gap, "over_control": over,
                })  # fmt: skip
    return out


def pick(records: list[dict]) -> list[dict]:
    """The stated rule: eligible when the gap >= 0.2 nats with its 95% interval above 0 and the plan
    beats the control by >= 0.1 nats; at most one temperature per (view, rule), the larger gap; the
    top 3 by gap."""
    eligible = [
        c for c in records
        if c["gap"][0] >= PICK["gap_min"] and c["gap"][1] > 0 and c["over_control"][0] >= PICK["over_control_min"]
    ]  # fmt: skip
    best: dict[tuple[str, str], dict] = {}
    for c in eligible:
        key = (c["view"], c["rule"])
        if key not in best or c["gap"][0] > best[key]["gap"][0]:
            best[key] = c
    return sorted(best.values(), key=lambda c: -c["gap"][0])[:PICK_TOP]


def report(data: dict) -> str:
    records = cells(data["pairs"])
    chosen = {(c["view"], c["rule"], c["temperature"]) for c in pick(records)}
    ci = lambda d: f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]" if not math.isnan(d[0]) else "n/a"  # noqa: E731
    lines = [
        f"Ceiling probe, likelihood part: {len(data['pairs'])} expert decisions of {len({r['task'] for r in data['pairs']})} "
        f"training-fold twc games (500-515), the untrained {data['model']}, guidance in the turn. NLL of the "
        "expert action (softmax over the admissible actions at the temperature); intervals: 95%, resampling games.",
        "",
        "| view | rule | T | NLL none | NLL expert | NLL control | gap = none - expert (>= 0.2) | expert over control = control - expert (>= 0.1) | picked |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for c in records:
        mark = "**yes**" if (c["view"], c["rule"], c["temperature"]) in chosen else ""
        lines.append(f"| {c['view']} | {c['rule']} | {c['temperature']} | {c['nll_none']:.3f} | {c['nll_expert']:.3f} "
                     f"| {c['nll_control']:.3f} | {ci(c['gap'])} | {ci(c['over_control'])} | {mark} |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--tasks", type=int, default=16, help="probe games (training fold)")
    p.add_argument("--probe-offset", type=int, default=500, help="first probe game in the train fold")
    p.add_argument("--sources", type=int, default=8, help="(unused: no family card here)")
    p.add_argument("--samples", type=int, default=0, help="(unused: no play here)")
    p.add_argument("--group", type=int, default=4, help="(unused)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (1 on a shared machine)")
    p.add_argument("--out", type=Path, default=OUT, help="folder for pairs.json, summary.md, picks.json")
    p.add_argument("--report-only", action="store_true", help="the table and picks from pairs.json")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        data = asyncio.run(measure(args))
        (args.out / "pairs.json").write_text(json.dumps(data, indent=1) + "\n")
    data = json.loads((args.out / "pairs.json").read_text())
    table = report(data)
    (args.out / "summary.md").write_text(table + "\n")
    picks = [
        {k: c[k] for k in ("view", "rule", "temperature", "gap", "over_control")}
        for c in pick(cells(data["pairs"]))
    ]
    (args.out / "picks.json").write_text(
        json.dumps({"rule": PICK | {"top": PICK_TOP}, "picks": picks}, indent=1) + "\n"
    )
    print(table)
    print("picked:", [(c["view"], c["rule"], c["temperature"]) for c in picks] or "none")


if __name__ == "__main__":
    main()
