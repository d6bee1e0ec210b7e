"""Does the trainer move the policy at these settings? The learning pilot before any comparison.

Plain GRPO (`scaffold.mode: none`) on the twc1 training pool (the first `--pool` train-fold games,
which recur), `--tasks-per-step` tasks a step, `--group` rollouts each, `--steps` steps, at each of a
grid of learning settings (lr x LoRA layers) and `--seeds`. Every `--eval-every` steps (and before the
first) the engine measures, without any scaffold:
- pool success: every pool game played `--samples` times, sampled (`eval.pool`: the primary
  endpoint of the demonstration, what the method claims the policy internalizes);
- the expert actions' NLL along the pool games' winning expert plans (`eval/expert_nll`);
then the last checkpoint plays `--heldout` dev games never looked at before (from `--heldout-offset`,
`--samples` each), beside the untrained policy on the same games and the same sampling seeds (the
`untrained-s<seed>` cells).

Settings are chosen from pool metrics only (docs/results.md states the rule before the cells ran):
stage `lr` runs every lr at `--top-layers`; stage `layers` runs the chosen lr with LoRA on every layer.

Each cell writes bench/results/pilot/<campaign>/<cell>.json when it finishes (commit it); a rerun
fills only the missing ones, and an interrupted cell resumes from its checkpoint
(bench/runs/pilot/<campaign>/<cell>/, ignored by git). Another policy (or any other spec change) is
given as `--set KEY=VALUE ...` overrides of the campaign's base spec, part of the protocol every cell
records; without --campaign their cells go to twc1-pilot-<the overrides' name> (`campaign_name`).

    python bench/studies/pilot.py                    # stage lr: lr 1e-3, 3e-4, 1e-4 x seeds 0 1
    python bench/studies/pilot.py --stage layers     # the chosen lr, LoRA on all layers (after stage lr)
    python bench/studies/pilot.py --report-only      # the table (summary.md) and curves.png from the cells
    python bench/studies/pilot.py --campaign twc1-transfer --pool 1000 --no-pool-eval --gap-tasks 8 --lrs 1e-3
                                             # the transfer pilot: a pool that (almost) never recurs
    python bench/studies/pilot.py --set policy.model=Qwen/Qwen2.5-1.5B-Instruct trainer.device=cuda --check
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import (  # noqa: E402
    REPO,
    RESULTS,
    add_set_flag,
    fmt,
    heldout,
    heldout_record,
    overrides_key,
    read_run,
    run_condition,
    untrained_heldout,
    with_overrides,
)
from bench.studies.sensitivity import setting_spec  # noqa: E402
from pats.stats import hierarchical_difference, hierarchical_rate  # noqa: E402

LRS = (1e-3, 3e-4, 1e-4)
PER_RUN = (
    "stage",
    "seeds",
    "report_only",
    "threads",
    "check",
    "keep_adapters",
)  # how a run was made, not what it measures
CAMPAIGN = "twc1-pilot"  # the 135M policy's committed campaign
# Keys the base spec or each cell gets from a flag or the grid: `--set` may not change them (the flag's
# value would be overwritten, or stay in the protocol while another value ran).
OWNED = {
    "trainer.lr": "the grid (stage lr: 1e-3, 3e-4, 1e-4)",
    "policy.lora.top_layers": "--top-layers (stage layers: all)",
    "seed": "--seeds",
    "trainer.threads": "--threads",
    "environment.num_train_tasks": "--pool",
    "environment.num_eval_tasks": "--eval-tasks",
    "trainer.steps": "--steps",
    "trainer.tasks_per_step": "--tasks-per-step",
    "trainer.group_size": "--group",
    "eval.every": "--eval-every",
    "eval.num_tasks": "--eval-tasks",
    "eval.samples_per_task": "--samples",
    "eval.gap_tasks": "--gap-tasks (default: --pool)",
    "eval.pool": "--no-pool-eval",
    "name": "--campaign and the cell (each run's name)",
    "logging.root": "--campaign (bench/runs/pilot/<campaign>/)",
}


def cell_name(lr: float, top_layers: int | None, seed: int) -> str:
    return f"lr{lr:.0e}-{'top' + str(top_layers) if top_layers else 'all'}-s{seed}"


def campaign_name(overrides: list[str]) -> str:
    """The campaign without --campaign: twc1-pilot, or twc1-pilot-<overrides_key> with --set."""
    return f"{CAMPAIGN}-{overrides_key(overrides)}" if overrides else CAMPAIGN


def base_spec(args) -> Path:
    """`pilot_spec`, written once per campaign (every cell's base)."""
    from pats.spec.loader import spec_to_yaml

    out = REPO / "bench" / "runs" / "pilot" / args.campaign
    out.mkdir(parents=True, exist_ok=True)
    path = out / "base.yaml"
    path.write_text(spec_to_yaml(pilot_spec(args)))
    return path


def pilot_spec(args):
    """twc1 with the pilot's sizes, no scaffold, then the --set overrides."""
    from pats.spec.models import ExperimentSpec

    data = setting_spec("twc1").model_dump(mode="json")
    data["environment"].update(num_train_tasks=args.pool, num_eval_tasks=args.eval_tasks)
    data["trainer"].update(steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group,
                           checkpoint_every=2)  # fmt: skip
    data["scaffold"].update(mode="none", initial_bank=None)
    data["eval"].update(every=args.eval_every, at_start=True, num_tasks=args.eval_tasks, greedy=False,
                        samples_per_task=args.samples, with_scaffold=False, gap_tasks=gap_tasks(args),
                        pool=args.pool_eval)  # fmt: skip
    data["logging"].update(progress=False, wandb="offline")
    return with_overrides(
        ExperimentSpec.model_validate(data), args.set, OWNED, "bench/studies/pilot.py --set"
    )


def gap_tasks(args) -> int:
    """The expert-NLL games: the whole pool unless --gap-tasks names fewer (a large pool's plans
    would cost more than the training)."""
    return args.pool if args.gap_tasks is None else args.gap_tasks


def train_cell(args, lr: float, top_layers: int | None, seed: int, spec_file: Path) -> dict:
    name = cell_name(lr, top_layers, seed)
    run_dir = REPO / "bench" / "runs" / "pilot" / args.campaign / name
    start = time.time()
    layers = f"policy.lora.top_layers={top_layers if top_layers else 'null'}"
    threads = [f"trainer.threads={args.threads}"] if args.threads else []
    what = run_condition(str(spec_file), [f"trainer.lr={lr}", layers, f"seed={seed}", *threads], run_dir)
    cache = run_dir / "report" / f"heldout_{args.heldout}_from{args.heldout_offset}.json"
    held = heldout(cache, args.heldout, run_dir, offset=args.heldout_offset)
    run = read_run(run_dir)
    keys = ("pool/success", "eval/expert_nll", "eval/success")
    return {
        "cell": name,
        "lr": lr,
        "top_layers": top_layers,
        "seed": seed,
        "trained": what,
        "seconds": round(time.time() - start, 1),
        "curve": [{"steps_done": s, **{k: m.get(k) for k in keys}} for s, m in run["evals"]],
        "train": [
            {
                "step": s,
                "success": m.get("train/success"),
                "informative_groups": m.get("train/informative_groups"),
            }
            for s, m in run["steps"]
        ],  # fmt: skip
        "heldout": heldout_record(held),
        "distinct_games": distinct_games(run_dir),
    }


def keep_adapter(args, cell: str, folder: Path) -> Path | None:
    """Copy a trained cell's final LoRA adapter (~2 MB) beside its result file, once, so that it can
    be committed and played on other games (`policy.init_adapter=<folder>/<cell>-adapter`). Its config
    names the spec's model, not this machine's cache path (as `pats warm-start` writes it)."""
    from pats.engine.run import load_run

    out = folder / f"{cell}-adapter"
    if out.is_dir():
        return out
    run_dir = REPO / "bench" / "runs" / "pilot" / args.campaign / cell
    spec, state = load_run(run_dir) if (run_dir / "spec.yaml").is_file() else (None, None)
    adapter = Path(state.path) / "policy" / "adapter" if state else None
    if spec is None or adapter is None or not adapter.is_dir():
        print(f"{cell}: no adapter to keep (its run folder or final checkpoint is gone)", file=sys.stderr)
        return None
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = spec.policy.model
    tmp = folder / f".{cell}-adapter.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "adapter_model.safetensors").write_bytes((adapter / "adapter_model.safetensors").read_bytes())
    tmp.rename(out)
    return out


def distinct_games(run_dir: Path) -> int:
    """How many different games the cell trained on (its `groups` events): 8 on a recurring pool."""
    from pats.logging.events import GroupsEvent, read_events

    return len({g.task for e in read_events(run_dir / "events.jsonl", GroupsEvent) for g in e.groups})


def untrained_cell(args, seed: int, spec_file: Path) -> dict:
    """The untrained policy on the same held-out games, sampled with the cell seed's stream."""
    cache = REPO / "bench" / "runs" / "pilot" / args.campaign / f"untrained-s{seed}" / "heldout.json"
    held = untrained_heldout(spec_file, seed, cache, args.heldout, args.heldout_offset)
    return {"cell": f"untrained-s{seed}", "seed": seed, "heldout": held}


def by_seed(cells: list[dict]) -> dict[int, dict[str, list[float]]]:
    return {c["seed"]: c["heldout"]["per_task"] for c in cells}


def load_cells(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def final_pool(cell: dict) -> float | None:
    """Final pool success; None in a campaign run with --no-pool-eval."""
    return cell["curve"][-1]["pool/success"]


def pool_change(cell: dict) -> str:
    start, end = cell["curve"][0]["pool/success"], final_pool(cell)
    return "n/a" if start is None or end is None else f"{start:.2f} -> {end:.2f}"


def chosen_lr(cells: list[dict], top_layers: int, seeds: list[int]) -> float | None:
    """The stated rule: the lr with the highest mean final pool success over `seeds` (ties within
    0.02 to the lower lr). Decided once no result of the missing cells (each anywhere in [0, 1]) could
    change it, so a cell that cannot matter need not run first; None until then."""
    lo, hi = {}, {}
    for lr in LRS:
        # A cell without a pool measurement (--no-pool-eval) counts as missing.
        mine = [
            c for c in cells if c.get("lr") == lr and c.get("top_layers") == top_layers and c["seed"] in seeds
        ]
        finals = [f for f in map(final_pool, mine) if f is not None]
        lo[lr] = sum(finals) / len(seeds)
        hi[lr] = (sum(finals) + len(seeds) - len(finals)) / len(seeds)
    for lr in sorted(LRS):  # the lowest lr chosen whatever the missing cells hold
        qualifies = lo[lr] >= max(hi[o] for o in LRS if o != lr) - 0.02
        no_lower = all(hi[x] < max(lo[o] for o in LRS if o != x) - 0.02 for x in LRS if x < lr)
        if qualifies and no_lower:
            return lr
    return None


def by_setting(trained: list[dict]) -> list[tuple[tuple[float, int | None], list[dict]]]:
    """The trained cells per (lr, LoRA layers), highest lr first, top-N layers before all."""
    groups: dict[tuple, list[dict]] = {}
    for c in trained:
        groups.setdefault((c["lr"], c["top_layers"]), []).append(c)
    return sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1] or 99))


def figure(cells: list[dict]):
    """The curves the table sums up, one line per cell (colour: setting; marker and dash: seed):
    pool success and the expert NLL at each evaluation, informative groups at each step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    trained = [c for c in cells if "lr" in c]
    # a --no-pool-eval campaign has no pool success: its first panel shows the dev games' success instead
    success_key = "eval/success" if trained and final_pool(trained[0]) is None else "pool/success"
    fig, (pool, nll, groups) = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, ((lr, top), cs) in enumerate(by_setting(trained)):
        for c in cs:
            style = {"color": f"C{i}", "marker": "os^vD"[c["seed"] % 5], "linestyle": ("-", "--", ":")[c["seed"] % 3],
                     "alpha": 0.85, "label": f"lr {lr:.0e}, LoRA {top or 'all'} layers, seed {c['seed']}"}  # fmt: skip
            steps = [p["steps_done"] for p in c["curve"]]
            pool.plot(steps, [p[success_key] for p in c["curve"]], **style)
            nll.plot(steps, [p["eval/expert_nll"] for p in c["curve"]], **style)
            groups.plot([t["step"] for t in c["train"]], [t["informative_groups"] for t in c["train"]],
                        **style | {"marker": None})  # fmt: skip
    p = trained[0]["protocol"] if trained else {}
    title = f"Pool success, no scaffold ({p.get('pool')} games x {p.get('samples')} sampled)"
    if success_key == "eval/success":
        title = f"Dev success at evaluations, no scaffold ({p.get('eval_tasks')} games x {p.get('samples')})"
    pool.set(title=title,
             xlabel="steps done", ylabel="success rate", ylim=(-0.02, 1.02))  # fmt: skip
    nll.set(
        title="Expert actions' NLL, no scaffold (pool games)", xlabel="steps done", ylabel="nats per decision"
    )
    groups.set(title="Informative groups (mixed outcomes) per step", xlabel="step",
               ylabel=f"groups, of {p.get('tasks_per_step')} a step")  # fmt: skip
    for ax in (pool, nll, groups):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    groups.yaxis.set_major_locator(MaxNLocator(integer=True))
    if trained:
        pool.legend(fontsize=8)
    fig.tight_layout()
    return fig


def summarize(cells: list[dict]) -> str:
    trained = [c for c in cells if "lr" in c]
    untrained = {c["seed"]: c for c in cells if c["cell"].startswith("untrained")}
    rows = ["| lr | LoRA layers | seeds | pool success by steps done (mean over seeds) | final - start, per seed "
            "| expert NLL start -> end | held-out success [95% CI over seeds and games] "
            "| held-out, trained - untrained (same games and seeds) [95% CI]; per seed |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (lr, top), cs in by_setting(trained):
        steps = [p["steps_done"] for p in cs[0]["curve"]]
        if final_pool(cs[0]) is None:  # --no-pool-eval: training success per step instead
            curve = "not measured (--no-pool-eval); train success, steps 0-7 / last 8: " + "; ".join(
                f"{statistics.mean(t['success'] for t in c['train'][:8]):.2f} / "
                f"{statistics.mean(t['success'] for t in c['train'][-8:]):.2f}"
                for c in cs
            )
            deltas = "n/a"
        else:
            curve = " / ".join(
                f"{s}: {statistics.mean(c['curve'][i]['pool/success'] for c in cs):.2f}"
                for i, s in enumerate(steps)
            )
            deltas = ", ".join(f"{final_pool(c) - c['curve'][0]['pool/success']:+.2f}" for c in cs)
        nll = "; ".join(
            f"{fmt(c['curve'][0]['eval/expert_nll'])} -> {fmt(c['curve'][-1]['eval/expert_nll'])}" for c in cs
        )
        held = hierarchical_rate(by_seed(cs)).fmt()
        base = [untrained[c["seed"]] for c in cs if c["seed"] in untrained]
        vs = hierarchical_difference(by_seed(cs), by_seed(base)).fmt() if base else "n/a"
        rows.append(f"| {lr:.0e} | {top or 'all'} | {len(cs)} | {curve} | {deltas} | {nll} | {held} | {vs} |")
    return "\n".join(rows)


def check_protocol(args, folder: Path) -> None:
    # Cells written before a flag existed ran as its default does: without overrides, the whole pool's
    # evaluation, every lr of the grid.
    defaults = {"set": [], "pool_eval": True, "gap_tasks": None, "lrs": list(LRS)}
    want = defaults | {k: v for k, v in vars(args).items() if k not in PER_RUN}
    for path in sorted(folder.glob("*.json")):
        had = defaults | {
            k: v for k, v in json.loads(path.read_text())["protocol"].items() if k not in PER_RUN
        }
        diff = sorted(k for k in want.keys() | had.keys() if want.get(k) != had.get(k))
        if diff:
            raise SystemExit(
                f"{path} ran another protocol ({', '.join(f'{k}: {had.get(k)} there, {want.get(k)} now' for k in diff)}); "
                "use another --campaign"
            )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--stage", choices=("lr", "layers"), default="lr",
                   help="lr: every lr at --top-layers; layers: the chosen lr with LoRA on all layers")  # fmt: skip
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--pool", type=int, default=8,
                   help="training games (train fold), drawn at random each step: 8 recur, 1000 almost never do")  # fmt: skip
    p.add_argument("--pool-eval", action=argparse.BooleanOptionalAction, default=True,
                   help="play every pool game at each evaluation (pool/success); off for a large pool")  # fmt: skip
    p.add_argument("--gap-tasks", type=int, default=None,
                   help="pool games whose expert plans give eval/expert_nll (default: the whole pool)")  # fmt: skip
    p.add_argument("--lrs", nargs="+", type=float, default=list(LRS),
                   help="stage lr's grid (default: 1e-3 3e-4 1e-4; the transfer pilot runs the chosen 1e-3)")  # fmt: skip
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--group", type=int, default=8, help="rollouts per group")
    p.add_argument("--top-layers", type=int, default=8, help="LoRA on the top N layers in stage lr")
    p.add_argument("--eval-every", type=int, default=8, help="pool success and expert NLL every N steps")
    p.add_argument("--eval-tasks", type=int, default=4, help="dev games at the engine's evaluations")
    p.add_argument("--samples", type=int, default=4, help="sampled episodes per game at every evaluation")
    p.add_argument("--heldout", type=int, default=32, help="dev games of the final held-out test")
    p.add_argument("--heldout-offset", type=int, default=96,
                   help="first held-out dev game (0-95 were used by the twc1 campaigns)")  # fmt: skip
    p.add_argument("--campaign", default=None,
                   help=f"folder under bench/results/pilot/ and bench/runs/pilot/ (default: {CAMPAIGN}; with --set, "
                   f"{CAMPAIGN}-<the overrides' name>)")  # fmt: skip
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of the training cells (1 on a machine shared with other jobs)")  # fmt: skip
    add_set_flag(p, "spec overrides of the campaign's base spec, dotted as in `pats run SPEC KEY=VALUE`, e.g. "
                 "policy.model=Qwen/Qwen2.5-1.5B-Instruct trainer.device=cuda; part of the protocol every cell "
                 f"records. Without --campaign, cells go to bench/results/pilot/{CAMPAIGN}-<each override's last key "
                 "part and value, letters and digits only, joined by '-'>/ (for the example: "
                 f"{CAMPAIGN}-modelQwenQwen2515BInstruct-devicecuda)")  # fmt: skip
    p.add_argument(
        "--keep-adapters",
        action="store_true",
        help="copy each trained cell's final LoRA adapter to <cell>-adapter/ beside its result "
        "file (~2 MB each, to commit), also for cells that finished before",
    )
    p.add_argument("--check", action="store_true",
                   help="build and validate the base spec, print the cells' folder, and stop (nothing loads)")  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="print the table from the cell files")
    args = p.parse_args(argv)
    args.campaign = args.campaign or campaign_name(args.set)
    if args.set or args.check:  # the spec every cell starts from, validated before anything loads
        from pats.errors import SpecError

        try:
            pilot_spec(args)
        except SpecError as err:
            p.exit(SpecError.exit_code, f"error: {err}\n")
    folder = RESULTS / "pilot" / args.campaign
    check_protocol(args, folder)
    if args.check:
        print(f"ok: the base spec; cells go to {folder}")
        return
    if not args.report_only:
        spec_file = base_spec(args)
        if args.stage == "lr":
            plan = [(lr, args.top_layers) for lr in args.lrs]
        else:
            lr = chosen_lr(load_cells(folder), args.top_layers, args.seeds)
            if lr is None:
                raise SystemExit(
                    "stage layers needs the stage-lr cells that decide the lr first: run `python bench/studies/pilot.py`"
                )
            print(f"chosen lr (final pool success, stage lr): {lr:.0e}")
            plan = [(lr, None)]
        protocol = {k: v for k, v in vars(args).items() if k not in ("report_only", "check")}
        for seed in args.seeds:  # seed-major: every setting has a seed before any has two
            out = folder / f"untrained-s{seed}.json"
            if not out.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                out.write_text(
                    json.dumps(untrained_cell(args, seed, spec_file) | {"protocol": protocol}, indent=1)
                    + "\n"
                )
            for lr, top in plan:
                out = folder / f"{cell_name(lr, top, seed)}.json"
                if not out.is_file():
                    result = train_cell(args, lr, top, seed, spec_file) | {"protocol": protocol}
                    out.write_text(json.dumps(result, indent=1) + "\n")
                    print(f"{result['cell']}: pool {pool_change(result)}, "
                          f"held-out {result['heldout']['successes']:.0f}/{result['heldout']['episodes']} "
                          f"({result['seconds']} s)", flush=True)  # fmt: skip
                if args.keep_adapters:
                    keep_adapter(args, cell_name(lr, top, seed), folder)
    cells = load_cells(folder)
    table = summarize(cells)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(table + "\n")
    if any("lr" in c for c in cells):
        import matplotlib.pyplot as plt

        fig = figure(cells)
        fig.savefig(folder / "curves.png", dpi=110)
        plt.close(fig)
        print(f"curves: {folder / 'curves.png'}")
    print(table)


if __name__ == "__main__":
    main()
