"""Does the scaffold help on held-out tasks? A small-scale demonstration under a fixed protocol.

Protocol (after the small-scale PATS reproduction on ALFWorld, notes/anchors.md):
- one setting chosen with bench/studies/sensitivity.py (training-fold probe tasks only), a fixed training pool
  of `--pool` tasks from the train fold so guidance can recur, held-out tasks from the dev fold that
  are never trained on (the test fold stays untouched);
- conditions that differ in one thing each: `none` (plain GRPO), `static` (a family card built from
  the verified expert plans of the training pool, never edited), `pats` (the same card as the initial
  bank, revised every step by the rules reviser with the privileged expert card, removal on),
  `no_removal` (pats without DELETE/COMPRESS); pats and no_removal run a quarter of each group as
  probes without the scaffold, as the method does;
- every condition sees the same tasks at the same step for a seed (the sampler depends on seed and
  step only); seeds `--seeds`;
- held-out success without the scaffold, sampled (`--samples` per task: greedy sits on a 0% floor at
  this size), on the same `--heldout` dev tasks for every condition: intervals over seeds and games
  (hierarchical bootstrap, pats/stats.py) for rates and for pats - X, per-seed differences beside
  them, and cells that trained identically to another condition's named instead of counted twice;
- training: informative-group fraction, success with and without the scaffold, and the engine's
  response-likelihood gap (eval/likelihood_gap) at each evaluation.

Each (condition, seed) cell writes bench/results/demonstration/<campaign>/<condition>-s<seed>.json
when it finishes (commit it): a later session fills only the missing cells. The campaign is the
setting's name unless `--campaign` names another (sizes other than the defaults need their own: a
campaign refuses cells of a different protocol). Run directories go to bench/runs/demonstration/
(ignored by git); an interrupted cell resumes from its checkpoint.

    python bench/studies/demonstration.py --setting twc1                       # the 8-step protocol
    python bench/studies/demonstration.py --setting twc1 --steps 24 --campaign twc1-24 --conditions none pats
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import (  # noqa: E402
    REPO,
    RESULTS,
    finished,
    fmt,
    heldout,
    heldout_record,
    read_run,
    run_condition,
    untrained_heldout,
)
from bench.studies.sensitivity import SETTINGS, Probe, setting_spec  # noqa: E402
from pats.stats import hierarchical_difference, hierarchical_rate  # noqa: E402

CONDITIONS: dict[str, tuple[str, ...]] = {
    "none": ("scaffold.mode=none", "scaffold.initial_bank=null"),
    "static": ("scaffold.mode=static", "scaffold.probe_fraction=0.0", "scaffold.cards=[outcome,contrast,failure]"),
    "pats": ("scaffold.mode=pats", "scaffold.privileged=true",
             "scaffold.cards=[outcome,contrast,failure,utility,expert]"),
    "no_removal": ("scaffold.mode=pats", "scaffold.privileged=true", "scaffold.removal=false",
                   "scaffold.cards=[outcome,contrast,failure,utility,expert]"),
    # Stated in docs/results.md before they were run (the twc1-h1 campaign): pats with one thing changed.
    "pats_noexpert": ("scaffold.mode=pats", "scaffold.cards=[outcome,contrast,failure,utility]"),
    "pats_compress05": ("scaffold.mode=pats", "scaffold.privileged=true", "judge.compress_threshold=0.5",
                        "scaffold.cards=[outcome,contrast,failure,utility,expert]"),
}  # fmt: skip
FIRST = ("none", "static", "pats", "no_removal")  # the default conditions


def base_spec(args) -> Path:
    """The setting's spec with the protocol's sizes, written once per setting (the cells' shared base)."""
    from pats.spec.loader import spec_to_yaml

    out = REPO / "bench" / "runs" / "demonstration" / args.campaign
    out.mkdir(parents=True, exist_ok=True)
    data = setting_spec(args.setting).model_dump(mode="json")
    data["environment"].update(num_train_tasks=args.pool, num_eval_tasks=args.heldout)
    data["trainer"].update(steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group,
                           checkpoint_every=1)  # fmt: skip
    data["policy"]["lora"]["top_layers"] = args.top_layers
    data["eval"].update(every=args.eval_every, at_start=True, num_tasks=args.eval_tasks, greedy=False,
                        samples_per_task=args.samples, with_scaffold=False, gap_tasks=args.pool)  # fmt: skip
    data["logging"].update(progress=False, wandb="offline")
    data["scaffold"]["initial_bank"] = str(bank(args))
    path = out / "base.yaml"
    from pats.spec.models import ExperimentSpec

    path.write_text(spec_to_yaml(ExperimentSpec.model_validate(data)))
    return path


def bank(args) -> Path:
    """The family card of the training pool (verified expert plans, role-abstracted), as a pats bank."""
    import asyncio

    path = RESULTS / "demonstration" / args.campaign / "bank.json"
    if path.is_file():
        return path
    probe_args = argparse.Namespace(probe_offset=0, tasks=0, sources=args.pool, group=4, samples=1)
    probe = Probe(args.setting, probe_args)

    async def go():
        try:
            return await probe.family_text()
        finally:
            await probe.close()

    text = asyncio.run(go())
    path.parent.mkdir(parents=True, exist_ok=True)
    scope = f"type:{probe.spec.environment.game}"
    path.write_text(
        json.dumps({"entries": [{"kind": "skill", "scope": scope, "text": text}]}, indent=1) + "\n"
    )
    return path


def cell(args, condition: str, seed: int, spec_file: Path) -> dict:
    from pats.logging.events import GroupsEvent, read_events

    run_dir = REPO / "bench" / "runs" / "demonstration" / args.campaign / f"{condition}-s{seed}"
    start = time.time()
    what = run_condition(str(spec_file), [*CONDITIONS[condition], f"seed={seed}"], run_dir)
    cache = (
        run_dir / "report" / f"heldout_{args.heldout}"
        f"{f'_from{args.heldout_offset}' if args.heldout_offset else ''}.json"
    )
    held = heldout(cache, args.heldout, run_dir, offset=args.heldout_offset)
    groups = [g for e in read_events(run_dir / "events.jsonl", GroupsEvent) for g in e.groups]
    run = read_run(run_dir)
    return {
        "setting": args.setting,
        "condition": condition,
        "seed": seed,
        "trained": what,
        "seconds": round(time.time() - start, 1),
        "groups": len(groups),
        "informative_groups": sum(len(set(g.rewards)) > 1 for g in groups),
        "train": [
            {
                k: m.get(k)
                for k in (
                    "train/success",
                    "train_with_scaffold/success",
                    "train_without_scaffold/success",
                    "train/informative_groups",
                    "scaffold/entries",
                    "scaffold/tokens",
                )
            }
            | {"step": s}
            for s, m in run["steps"]
        ],  # fmt: skip
        "evals": [{"steps_done": s, **m} for s, m in run["evals"]],
        "heldout": heldout_record(held),
    }


UNTRAINED = "untrained"  # every campaign's reference: the policy before training, same games and seeds


def untrained_cell(args, seed: int, spec_file: Path) -> dict:
    """The untrained policy on the campaign's held-out games, sampled with the seed's stream: what
    every condition's training is measured against (no training record, so it matches no cell)."""
    start = time.time()
    run_dir = REPO / "bench" / "runs" / "demonstration" / args.campaign / f"{UNTRAINED}-s{seed}"
    cache = run_dir / f"heldout_{args.heldout}_from{args.heldout_offset}.json"
    held = untrained_heldout(spec_file, seed, cache, args.heldout, args.heldout_offset)
    return {
        "setting": args.setting,
        "condition": UNTRAINED,
        "seed": seed,
        "trained": "no",
        "seconds": round(time.time() - start, 1),
        "groups": 0,
        "informative_groups": 0,
        "train": [],
        "evals": [],
        "heldout": held,
    }


CI = "95% CI over seeds and games"
NOTE = (
    "Intervals: 95%, hierarchical bootstrap (resample seeds, then games within each drawn seed; "
    "pats/stats.py); per seed: the difference in each seed. A seed whose two cells trained "
    "identically (same per-step scaffold entries, tokens and train successes) is left out of that "
    "difference and named; the last column names the condition a cell trained identically to."
)


def load_cells(campaign: str) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted((RESULTS / "demonstration" / campaign).glob("*-s*.json"))
    ]


def same_training(a: dict, b: dict) -> bool:
    """Two cells of one seed whose per-step training records (scaffold entries and tokens, train
    successes with and without the scaffold, informative groups) are equal step for step."""
    return a["seed"] == b["seed"] and bool(a.get("train")) and a.get("train") == b.get("train")


def identical_cells(cells: list[dict], others: Sequence[dict] = ()) -> dict[tuple[str, int], str]:
    """(condition, seed) -> the condition whose cell of the same seed trained identically
    (`same_training`). Within a campaign a cell is marked against the condition listed before it
    (CONDITIONS order); `others` (cells of other campaigns) are named `campaign's condition` and only
    when the condition differs (the same condition and seed is meant to train the same)."""
    order = {c: i for i, c in enumerate(CONDITIONS)}
    out: dict[tuple[str, int], str] = {}
    for c in sorted(cells, key=lambda c: order.get(c["condition"], len(order))):
        key = (c["condition"], c["seed"])
        for o in cells:
            if (
                o is not c
                and same_training(o, c)
                and order.get(o["condition"], 99) < order.get(c["condition"], 99)
            ):
                out.setdefault(key, o["condition"])
        for o in others:
            if o["condition"] != c["condition"] and same_training(o, c):
                out.setdefault(key, f"{o['protocol'].get('campaign', o['setting'])}'s {o['condition']}")
    return out


def identical_note(cells: list[dict], same: dict[tuple[str, int], str]) -> str:
    notes = [
        f"s{c['seed']} = {same[(c['condition'], c['seed'])]}"
        for c in cells
        if (c["condition"], c["seed"]) in same
    ]
    return "; ".join(notes) or "-"


def other_campaigns(campaign: str, cells: list[dict]) -> list[dict]:
    """Cells of the other campaigns of the same setting (for identical training across campaigns)."""
    setting = cells[0]["setting"] if cells else None
    folders = sorted(p for p in (RESULTS / "demonstration").iterdir() if p.is_dir() and p.name != campaign)
    order = {c: i for i, c in enumerate(CONDITIONS)}
    cells = [c for f in folders for c in load_cells(f.name) if c["setting"] == setting]
    return sorted(cells, key=lambda c: order.get(c["condition"], len(order)))


def summarize(setting: str) -> str:
    cells = load_cells(setting)
    same = identical_cells(cells, other_campaigns(setting, cells))
    by: dict[str, list[dict]] = {}
    for c in cells:
        by.setdefault(c["condition"], []).append(c)
    rows = [f"| condition | seeds | informative groups | held-out success [{CI}] | pats - X [{CI}]; per seed "
            f"| X - none [{CI}]; per seed | X - untrained [{CI}] | likelihood gap first -> last "
            "| trained identically to |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for cond in (UNTRAINED, *CONDITIONS):
        if cond not in by:
            continue
        cs = by[cond]
        inf, n = sum(c["informative_groups"] for c in cs), sum(c["groups"] for c in cs)
        wins, eps = sum(c["heldout"]["successes"] for c in cs), sum(c["heldout"]["episodes"] for c in cs)
        rate = hierarchical_rate(outcomes(cs, ("heldout",)))
        diff = paired(by.get("pats", []), cs, ("heldout",)) if cond != "pats" else "n/a"
        vs_none = paired(cs, by.get("none", []), ("heldout",)) if cond != "none" else "n/a"
        vs_untrained = paired(cs, by.get(UNTRAINED, []), ("heldout",)) if cond != UNTRAINED else "n/a"
        gaps = [[e.get("eval/likelihood_gap") for e in c["evals"]] for c in cs]
        gap = "; ".join(f"{fmt(g[0])} -> {fmt(g[-1])}" for g in gaps if g and g[0] is not None) or "n/a"
        rows.append(f"| {cond} | {len(cs)} | {inf}/{n} = {inf / max(n, 1):.3f} | {rate.fmt()} ({int(wins)}/{eps}) "
                    f"| {diff} | {vs_none} | {vs_untrained} | {gap} | {identical_note(cs, same)} |")  # fmt: skip
    return "\n".join(rows) + "\n\n" + NOTE


def refresh(args, folder: Path) -> None:
    """Each cell file rebuilt from its finished run directory; how it was trained and timed is kept."""
    spec_file = REPO / "bench" / "runs" / "demonstration" / args.campaign / "base.yaml"
    for path in sorted(folder.glob("*-s*.json")):
        old = json.loads(path.read_text())
        if not finished(REPO / "bench" / "runs" / "demonstration" / args.campaign / path.stem, args.steps):
            print(f"{path.stem}: no finished run directory here; left as it is")
            continue
        new = cell(args, old["condition"], old["seed"], spec_file)
        new |= {k: old[k] for k in ("trained", "seconds", "protocol") if k in old}
        path.write_text(json.dumps(new, indent=1) + "\n")
        print(f"refreshed {path}")


# Arguments that may differ between invocations of one campaign.
PER_RUN = ("conditions", "seeds", "report_only", "refresh", "fresh")


def check_protocol(args, folder: Path) -> None:
    """Refuse to add cells to a campaign whose finished cells ran another protocol (steps, pool, ...)."""
    want = {k: v for k, v in vars(args).items() if k not in PER_RUN}
    for path in sorted(folder.glob("*-s*.json")):
        had = {k: v for k, v in json.loads(path.read_text())["protocol"].items() if k not in PER_RUN}
        had.setdefault("campaign", args.campaign)  # cells written before campaigns existed
        had.setdefault("heldout_offset", 0)
        diff = sorted(k for k in want.keys() | had.keys() if want.get(k) != had.get(k))
        if diff:
            raise SystemExit(
                f"{path} ran another protocol ({', '.join(f'{k}: {had.get(k)} here, {want.get(k)} now' for k in diff)}); "
                f"give --campaign a new name for these sizes"
            )


def paired(a: list[dict], b: list[dict], keys: tuple[str, ...]) -> str:
    """a - b in held-out success with its hierarchical interval and per-seed differences, over the
    seeds both have; a seed whose two cells trained identically (`same_training`) is left out (it is
    one result, not two) and named."""
    seeds = {c["seed"] for c in a} & {c["seed"] for c in b}
    twins = sorted(
        s for s in seeds if any(same_training(x, y) for x in a for y in b if x["seed"] == y["seed"] == s)
    )
    kept = seeds - set(twins)
    note = f" (s{', s'.join(map(str, twins))} trained identically: left out)" if twins else ""
    if not kept:
        return "n/a" + note
    d = hierarchical_difference(outcomes(a, keys, kept), outcomes(b, keys, kept))
    return d.fmt() + note


def outcomes(
    cells: list[dict], keys: tuple[str, ...], seeds: set[int] | None = None
) -> dict[int, dict[str, list[float]]]:
    """seed -> game -> outcomes, from the cells' `keys` held-out records (several: their games pooled)."""
    out: dict[int, dict[str, list[float]]] = {}
    for c in cells:
        if seeds is None or c["seed"] in seeds:
            for key in keys:
                for task, values in c[key]["per_task"].items():
                    out.setdefault(c["seed"], {}).setdefault(task, []).extend(values)
    return out


def fresh(args, folder: Path) -> None:
    """A replication on held-out tasks no one has looked at: each finished cell's final checkpoint on
    the next `--heldout` dev tasks (indices heldout .. 2 x heldout - 1), the same way as the first
    test, written into the cell file as `heldout_fresh` (one cell at a time, each saved when done)."""
    for path in sorted(folder.glob("*-s*.json")):
        cell_data = json.loads(path.read_text())
        if "heldout_fresh" in cell_data or cell_data["condition"] not in args.conditions:
            continue
        if cell_data["seed"] not in args.seeds:
            continue
        run_dir = REPO / "bench" / "runs" / "demonstration" / args.campaign / path.stem
        if not finished(run_dir, args.steps):
            print(f"{path.stem}: no finished run directory here; skipped")
            continue
        start = time.time()
        cache = run_dir / "report" / f"heldout_{args.heldout}_from{args.heldout}.json"
        held = heldout(cache, args.heldout, run_dir, offset=args.heldout)
        cell_data["heldout_fresh"] = {"offset": args.heldout, **heldout_record(held),
                                     "seconds": round(time.time() - start, 1)}  # fmt: skip
        path.write_text(json.dumps(cell_data, indent=1) + "\n")
        print(f"{path.stem}: fresh held-out {sum(held['success']):.0f}/{len(held['success'])}", flush=True)


def summarize_fresh(setting: str) -> str:
    """pats - X on the fresh held-out games, and on both sets of games together."""
    cells = [c for c in load_cells(setting) if "heldout_fresh" in c]
    same = identical_cells(cells)
    by: dict[str, list[dict]] = {}
    for c in cells:
        by.setdefault(c["condition"], []).append(c)
    both = ("heldout", "heldout_fresh")
    rows = [f"| condition | seeds | fresh held-out success [{CI}] | pats - X [{CI}]; per seed "
            f"| both sets: success [{CI}] | both sets: pats - X [{CI}]; per seed | trained identically to |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for cond in (c for c in CONDITIONS if c in by):
        cs = by[cond]
        wins = sum(c["heldout_fresh"]["successes"] for c in cs)
        eps = sum(c["heldout_fresh"]["episodes"] for c in cs)
        rate = hierarchical_rate(outcomes(cs, ("heldout_fresh",)))
        rate_both = hierarchical_rate(outcomes(cs, both))
        pats = by.get("pats", [])
        diff = paired(pats, cs, ("heldout_fresh",)) if cond != "pats" else "n/a"
        diff_both = paired(pats, cs, both) if cond != "pats" else "n/a"
        rows.append(f"| {cond} | {len(cs)} | {rate.fmt()} ({int(wins)}/{eps}) | {diff} | {rate_both.fmt()} "
                    f"| {diff_both} | {identical_note(cs, same)} |")  # fmt: skip
    return "\n".join(rows) + "\n\n" + NOTE


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--setting", choices=list(SETTINGS), default="twc", help="chosen with bench/studies/sensitivity.py"
    )
    p.add_argument("--conditions", nargs="+", choices=list(CONDITIONS), default=list(FIRST))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    p.add_argument("--pool", type=int, default=8, help="training tasks (train fold); they recur")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="rollouts per group")
    p.add_argument("--top-layers", type=int, default=8, help="LoRA on the top N layers only (update speed)")
    p.add_argument("--eval-every", type=int, default=4, help="engine evaluations (curve and likelihood gap)")
    p.add_argument("--eval-tasks", type=int, default=4, help="dev tasks at the engine's evaluations")
    p.add_argument("--heldout", type=int, default=32, help="dev tasks of the final held-out test")
    p.add_argument("--samples", type=int, default=2, help="sampled episodes per held-out task")
    p.add_argument(
        "--heldout-offset",
        type=int,
        default=0,
        help="the held-out test uses dev tasks from this index on (a campaign of new conditions "
        "takes games earlier campaigns have not been tested on)",
    )
    p.add_argument("--report-only", action="store_true", help="print the table from the cell files")
    p.add_argument(
        "--refresh",
        action="store_true",
        help="re-read finished cells' run directories into their files (no training; after the "
        "record gains a field)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="replicate on the next --heldout dev tasks, never looked at: each finished cell's "
        "final checkpoint, no training (writes heldout_fresh into the cell files)",
    )
    p.add_argument(
        "--campaign",
        default=None,
        help="folder name under bench/results/demonstration/ and bench/runs/demonstration/ "
        "(default: the setting); a protocol other than the default sizes needs its own",
    )
    args = p.parse_args(argv)  # fmt: skip
    args.campaign = args.campaign or args.setting
    folder = RESULTS / "demonstration" / args.campaign
    check_protocol(args, folder)
    if args.refresh:
        refresh(args, folder)
    elif args.fresh:
        fresh(args, folder)
        table = summarize_fresh(args.campaign)
        (folder / "summary_fresh.md").write_text(table + "\n")
        print(table)
        return
    elif not args.report_only:
        spec_file = base_spec(args)
        for seed in args.seeds:  # seed-major: whole seeds finish first
            for cond in (UNTRAINED, *args.conditions):
                out = folder / f"{cond}-s{seed}.json"
                if out.is_file():
                    continue
                result = (
                    untrained_cell(args, seed, spec_file)
                    if cond == UNTRAINED
                    else cell(args, cond, seed, spec_file)
                )
                result["protocol"] = {k: v for k, v in vars(args).items() if k != "report_only"}
                out.write_text(json.dumps(result, indent=1) + "\n")
                h = result["heldout"]
                print(f"{cond:10s} seed {seed}: informative {result['informative_groups']}/{result['groups']}, "
                      f"held-out {h['successes']:.0f}/{h['episodes']} ({result['seconds']} s)", flush=True)  # fmt: skip
    table = summarize(args.campaign)
    (folder / "summary.md").parent.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(table + "\n")
    if (folder / "summary_fresh.md").is_file():  # the replication's table, recomputed the same way
        (folder / "summary_fresh.md").write_text(summarize_fresh(args.campaign) + "\n")
    print(table)


if __name__ == "__main__":
    main()
