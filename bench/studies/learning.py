"""Does the scaffold help a 135M policy learn twc? PATS against plain GRPO (`none`), a static bank
(`static`) and an add-only bank (`grow`), optionally the ablations, at an equal rollout budget.

Every condition is a spec in experiments/ run through `pats run`'s entry points (its checks, then
pats' own `train()`), one run directory each under --out; conditions with the same seed train on
paired task draws (the sampler depends only on seed and step). Held-out success is measured without
the scaffold on dev-fold games: the untrained policy once (LoRA starts as the identity and the
evaluation is greedy, so it is the same policy for every condition and seed), every `eval_every`
steps by the engine on the first `eval_tasks` games (the learning curve), and at the end on
`heldout_tasks` games with per-task outcomes (the paired test).
Prints per condition the informative-group fraction, train success with and without the scaffold,
held-out success with 95% Wilson intervals, the area under the curve, and PATS minus each baseline
(paired by seed and game, hierarchical bootstrap over seeds and games: pats/stats.py); writes
bench/results/learning_<budget>.json and a plot beside it.
Rerun the same command after an interruption: finished conditions are skipped, the rest resumed.

    python bench/studies/learning.py --budget small                   # ~2 h on 2 cores; see BUDGETS
    python bench/studies/learning.py --budget small --ablations       # + removal off, each card type off
    python bench/studies/learning.py --budget small --setting hard --reward score
    python bench/studies/learning.py --budget small --report-only     # tables and plots from the run dirs
    python bench/studies/learning.py --budget early --conditions pats none  # the first-20-steps target
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import (  # noqa: E402
    ABLATIONS,
    BASELINES,
    CONDITIONS,
    INFORMATIVE,
    INFORMATIVE_DEFAULT,
    REPO,
    RESULTS,
    SETTINGS,
    UnitCosts,
    add_set_flag,
    eval_seconds,
    fmt,
    heldout,
    overrides_key,
    read_run,
    run_condition,
    step_seconds,
    write_result,
)
from pats.stats import auc, detectable_difference, hierarchical_difference, wilson  # noqa: E402

EARLY_STEPS = 20  # the issue's target: informative fraction over the first 20 steps


@dataclass(frozen=True)
class Budget:
    steps: int
    tasks_per_step: int
    group_size: int
    seeds: tuple[int, ...]
    eval_every: int
    eval_tasks: int  # games at the engine's evaluations every eval_every steps (the curve)
    heldout_tasks: int  # games at the start (untrained, shared) and the end (the paired test)
    max_turns: int = 10
    shows: str = ""


BUDGETS = {
    "smoke": Budget(
        steps=1,
        tasks_per_step=1,
        group_size=4,
        seeds=(0,),
        eval_every=1,
        eval_tasks=2,
        heldout_tasks=4,
        max_turns=3,
        shows="that the code runs end to end; nothing else",
    ),
    # ~1.9 h on 2 free cores (estimate printed at start): 8 paired steps, 1 seed. It can show the
    # early informative-group fraction (16 groups per condition) and prompt tokens; held-out success
    # after 8 steps stays near the untrained level, and 128 episodes detect only a ~11-point difference.
    "small": Budget(
        steps=8,
        tasks_per_step=2,
        group_size=4,
        seeds=(0,),
        eval_every=4,
        eval_tasks=16,
        heldout_tasks=128,
        shows="informative fraction and prompt tokens over 8 paired steps; held-out success is "
        "underpowered (1 seed, 128 episodes, 8 steps: learning takes hundreds)",
    ),
    # The issue's early-signal target alone: pats against none over the first 20 paired steps
    # (`--conditions pats none`, ~1 h on 2 free cores). 40 groups per condition; one curve point at
    # the end on 16 games and no held-out test, which 20 steps cannot move (facts.md).
    "early": Budget(
        steps=20,
        tasks_per_step=2,
        group_size=4,
        seeds=(0,),
        eval_every=20,
        eval_tasks=16,
        heldout_tasks=0,
        shows="the informative-group fraction over the first 20 paired steps; no held-out test",
    ),
    # For a GPU: 3 seeds x 150 steps of 8 tasks x 8 rollouts (the published ALFWorld comparison ran
    # 150 steps), curve on 128 games every 10 steps, final test on 256 games per seed (768 paired).
    "large": Budget(
        steps=150,
        tasks_per_step=8,
        group_size=8,
        seeds=(0, 1, 2),
        eval_every=10,
        eval_tasks=128,
        heldout_tasks=256,
        shows="held-out success with ~5-point resolution (768 paired episodes per condition)",
    ),
}


def overrides(b: Budget, seed: int, setting: str, reward: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        f"seed={seed}",
        f"trainer.steps={b.steps}",
        f"trainer.tasks_per_step={b.tasks_per_step}",
        f"trainer.group_size={b.group_size}",
        "trainer.checkpoint_every=1",  # an interruption loses at most the step in flight
        f"environment.max_turns={b.max_turns}",
        f"environment.num_eval_tasks={max(b.heldout_tasks, b.eval_tasks)}",
        f"environment.reward={reward}",
        f"eval.every={b.eval_every}",
        f"eval.num_tasks={b.eval_tasks}",
        "eval.at_start=false",  # the untrained policy is evaluated once for all conditions
        # greedy, one episode per game, as its results were measured (the quickstart now samples)
        "eval.greedy=true",
        "eval.samples_per_task=1",
        "eval.with_scaffold=false",
        "logging.wandb=disabled",
        "logging.progress=false",
        *SETTINGS[setting],
        *extra,  # --set: last, so they win
    ]


def estimate(b: Budget, conditions, u: UnitCosts) -> tuple[float, dict[str, float]]:
    """Seconds for the whole budget (and per condition, all seeds), from the unit costs."""
    evals = b.steps // b.eval_every + (1 if b.steps % b.eval_every else 0)
    per = {}
    for c in conditions:
        inf = INFORMATIVE.get(c, INFORMATIVE_DEFAULT)
        one = (
            b.steps * step_seconds(b.tasks_per_step, b.group_size, inf, b.max_turns, u)
            + evals * eval_seconds(b.eval_tasks, b.max_turns, u)
            + eval_seconds(b.heldout_tasks, b.max_turns, u)
            + (2 if b.heldout_tasks else 1) * u.startup_s  # training, then the held-out evaluation
        )
        per[c] = one * len(b.seeds)
    untrained = eval_seconds(b.heldout_tasks, b.max_turns, u) + u.startup_s if b.heldout_tasks else 0.0
    return untrained + sum(per.values()), per


# -- reading the runs back ------------------------------------------------------------------------


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return fmean(values) if values else None


def paired_steps(runs: dict, seed: int) -> set[int]:
    """The steps of `seed` that every started condition has finished: a benchmark stopped part-way
    still compares its conditions on the same (paired) task draws."""
    started = [{k for k, _ in r["steps"]} for (_, s), r in runs.items() if s == seed and r["steps"]]
    return set.intersection(*started) if started else set()


def summarize(out: Path, b: Budget, conditions) -> dict:
    """Everything the tables need, read from the run directories under `out` (no model)."""
    untrained_file = out / "untrained" / f"heldout_{b.heldout_tasks}.json"
    untrained = json.loads(untrained_file.read_text()) if untrained_file.is_file() else None
    start = fmean(untrained["success"][: b.eval_tasks]) if untrained else None  # the curve's x=0
    runs = {(c, s): read_run(out / f"{c}-s{s}") for c in conditions for s in b.seeds}
    paired = {seed: paired_steps(runs, seed) for seed in b.seeds}
    rows: dict[str, dict] = {}
    for cond in conditions:
        seeds, informative, early, tokens, turns, curves = [], [], [], [], [], []
        with_s: list[float | None] = []  # None: a seed whose steps held no such rollout
        without_s: list[float | None] = []
        outcomes: dict[int, dict[str, float]] = {}  # seed -> task -> success
        for seed in b.seeds:
            run_dir = out / f"{cond}-s{seed}"
            run = runs[cond, seed]
            if not run["steps"]:
                continue
            seeds.append(seed)
            m = [metrics for k, metrics in sorted(run["steps"], key=lambda s: s[0]) if k in paired[seed]]
            informative.append(fmean(x["train/informative_fraction"] for x in m))
            early.append(fmean(x["train/informative_fraction"] for x in m[:EARLY_STEPS]))
            if cond == "none":  # every rollout is without a scaffold
                without_s.append(fmean(x["train/success"] for x in m))
            else:
                with_s.append(_mean(x.get("train_with_scaffold/success") for x in m))
                without_s.append(_mean(x.get("train_without_scaffold/success") for x in m))
            tokens.append(fmean(x["train/prompt_tokens"] for x in m))
            turns.append(fmean(x["train/turns"] for x in m))
            curve = {x: e["eval/success"] for x, e in run["evals"] if "eval/success" in e}
            if start is not None:
                curve[0] = start
            curves.append(curve)
            final = run_dir / "report" / f"heldout_{b.heldout_tasks}.json"
            if final.is_file():
                h = json.loads(final.read_text())
                outcomes[seed] = dict(zip(h["tasks"], h["success"], strict=True))
        xs = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        ys = [fmean(c[x] for c in curves) for x in xs]
        k = int(sum(sum(o.values()) for o in outcomes.values()))
        n = sum(len(o) for o in outcomes.values())
        rows[cond] = {
            "seeds": seeds,
            "paired_steps": {seed: len(paired[seed]) for seed in seeds},
            "informative_early": _mean(early),
            "informative": _mean(informative),
            "train_success_with_scaffold": _mean(with_s),
            "train_success_without_scaffold": _mean(without_s),
            "prompt_tokens_per_rollout": _mean(tokens),
            "turns_per_rollout": _mean(turns),
            "curve": {"steps": xs, "success": ys},
            "auc": auc(xs, ys) if xs else None,
            "heldout": {"successes": k, "episodes": n, "success": k / n if n else None, "ci95": wilson(k, n)}
            if n
            else None,
            "_outcomes": outcomes,
        }
    reference = "pats" if "pats" in rows else None
    comparisons = {}
    for other in rows:
        if reference is None or other == reference:
            continue
        comparisons[f"pats-{other}"] = compare(rows[reference], rows[other])
    return {
        "untrained_heldout": {
            "successes": int(sum(untrained["success"])),
            "episodes": len(untrained["success"]),
        }
        if untrained
        else None,
        "conditions": rows,
        "comparisons": comparisons,
    }


def compare(a: dict, b: dict) -> dict:
    """a - b: held-out success (paired by seed and game over the seeds both finished, its interval
    over seeds and games: pats/stats.py; with one seed, the bootstrap over games), AUC, informative
    ratio."""
    pa = {s: {t: [x] for t, x in o.items()} for s, o in a["_outcomes"].items()}
    pb = {s: {t: [x] for t, x in o.items()} for s, o in b["_outcomes"].items()}
    d = hierarchical_difference(pa, pb)
    paired = sum(len(set(pa[s]) & set(pb[s])) for s in set(pa) & set(pb))
    diff, lo, hi = (d.interval.estimate, d.interval.lo, d.interval.hi) if paired else (None, None, None)
    ia, ib = a["informative_early"], b["informative_early"]
    return {
        "heldout_diff": diff,
        "heldout_diff_ci95": [lo, hi],
        "heldout_diff_per_seed": dict(d.per_seed),
        "paired_episodes": paired,
        "auc_diff": a["auc"] - b["auc"] if a["auc"] is not None and b["auc"] is not None else None,
        "informative_early_ratio": ia / ib if ia is not None and ib else None,
    }


# -- printing and plotting ------------------------------------------------------------------------


def tables(summary: dict, b: Budget) -> str:
    lines = [
        f"| condition | seeds | informative (first {EARLY_STEPS}) | informative (all) | train success with "
        "/ without scaffold | held-out success [95% CI] | AUC |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cond, r in summary["conditions"].items():
        h = r["heldout"]
        held = (
            f"{h['success']:.3f} [{h['ci95'][0]:.3f}, {h['ci95'][1]:.3f}] ({h['successes']}/{h['episodes']})"
            if h
            else "n/a"
        )
        lines.append(
            f"| {cond} | {len(r['seeds'])} | {fmt(r['informative_early'])} | {fmt(r['informative'])} | "
            f"{fmt(r['train_success_with_scaffold'])} / {fmt(r['train_success_without_scaffold'])} | "
            f"{held} | {fmt(r['auc'])} |"
        )
    lines += [
        "",
        "| comparison | held-out diff [95% CI over seeds and games] | paired episodes | AUC diff | informative ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in summary["comparisons"].items():
        lo, hi = c["heldout_diff_ci95"]
        lines.append(
            f"| {name} | {fmt(c['heldout_diff'])} [{fmt(lo)}, {fmt(hi)}] | {c['paired_episodes']} | "
            f"{fmt(c['auc_diff'])} | {fmt(c['informative_early_ratio'], 2)} |"
        )
    u = summary["untrained_heldout"]
    if u:
        p = u["successes"] / u["episodes"]
        n = b.heldout_tasks * len(b.seeds)
        lines += [
            "",
            f"Untrained held-out success {u['successes']}/{u['episodes']} = {p:.3f}; with {n} episodes per "
            f"condition a difference of about {detectable_difference(p, n):.2f} is detectable (80% power, "
            "5%, unpaired).",
        ]
    return "\n".join(lines)


def targets(summary: dict) -> list[str]:
    rows, comps = summary["conditions"], summary["comparisons"]
    out = []
    ratio = comps.get("pats-none", {}).get("informative_early_ratio")
    out.append(f"informative fraction pats/none, first {EARLY_STEPS} steps: {fmt(ratio, 2)} (target >= 1.5)")
    if "pats-none" in comps and rows["pats"]["heldout"] and rows["none"]["heldout"]:
        c, hp, hn = comps["pats-none"], rows["pats"]["heldout"], rows["none"]["heldout"]
        separate = hp["ci95"][0] > hn["ci95"][1]
        out.append(
            f"held-out pats - none: {fmt(c['heldout_diff'])} (target >= 0.10, Wilson intervals "
            f"{'do not overlap' if separate else 'overlap'})"
        )
    return out


def plot(summary: dict, out_png: Path, out: Path, b: Budget) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, (cond, r) in enumerate(summary["conditions"].items()):
        # conditions often coincide here (all-zero curves): marker and dash tell them apart
        style = {"marker": "os^vDx*+P"[i % 9], "linestyle": ("-", "--", ":", "-.")[i % 4], "alpha": 0.8}
        axes[0].plot(r["curve"]["steps"], r["curve"]["success"], label=cond, **style)
        for ax, key in ((axes[1], "train/informative_fraction"), (axes[2], "train/prompt_tokens")):
            per_seed = [dict(read_run(out / f"{cond}-s{s}")["steps"]) for s in r["seeds"]]
            steps = sorted(set.intersection(*(set(p) for p in per_seed))) if per_seed else []
            ax.plot(steps, [fmean(p[s][key] for p in per_seed) for s in steps], label=cond, **style)
    axes[0].set(title=f"Held-out success, no scaffold ({b.eval_tasks} games)", xlabel="steps done")
    axes[1].set(title="Informative-group fraction", xlabel="step")
    axes[2].set(title="Prompt tokens per rollout", xlabel="step")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


# -- main -----------------------------------------------------------------------------------------


def run_all(
    b: Budget,
    conditions,
    out: Path,
    setting: str,
    reward: str,
    final_eval: bool = True,
    extra: tuple[str, ...] = (),
) -> None:
    from pats.spec import load_spec

    started = time.perf_counter()
    final_eval = final_eval and b.heldout_tasks > 0  # a budget without a held-out test
    if final_eval:
        base = load_spec(REPO / CONDITIONS["none"][0], overrides(b, b.seeds[0], setting, reward, extra))
        heldout(out / "untrained" / f"heldout_{b.heldout_tasks}.json", b.heldout_tasks, base_spec=base)
        print(f"[{time.perf_counter() - started:6.0f} s] untrained policy evaluated", flush=True)
    for seed in b.seeds:  # seed-major: an interrupted benchmark has whole seeds done first
        for cond in conditions:
            spec_file, cond_extra = CONDITIONS[cond]
            run_dir = out / f"{cond}-s{seed}"
            what = run_condition(
                spec_file, [*overrides(b, seed, setting, reward, extra), *cond_extra], run_dir
            )
            if final_eval:
                heldout(run_dir / "report" / f"heldout_{b.heldout_tasks}.json", b.heldout_tasks, run_dir)
            print(f"[{time.perf_counter() - started:6.0f} s] {cond} seed {seed}: {what}", flush=True)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="small", help="steps, seeds and sizes")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="easy", help="hard: 2 rooms, 3 items")
    parser.add_argument(
        "--reward", choices=["win", "score"], default="win", help="score: the game's partial score"
    )
    add_set_flag(
        parser,
        "spec overrides for every condition, e.g. environment.num_train_tasks=8 (repeatable; named in the "
        "run directory and result file)",
    )
    parser.add_argument("--out", type=Path, help="run directories (default bench/runs/<bench>/<budget>...)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON result goes")
    parser.add_argument("--report-only", action="store_true", help="read existing run dirs; train nothing")
    parser.add_argument(
        "--turn-s", type=float, default=UnitCosts.turn_s, help="cost model: s per policy turn"
    )
    parser.add_argument(
        "--decision-s", type=float, default=UnitCosts.decision_s, help="cost model: s per trained decision"
    )


def budget_key(args) -> str:
    """Names the run directories and result files: the budget plus whatever departs from the default."""
    return "-".join(
        [
            args.budget,
            *([args.setting] if args.setting != "easy" else []),
            *([args.reward] if args.reward != "win" else []),
            *([overrides_key(args.set)] if args.set else []),
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--ablations", action="store_true", help="also removal off and each card type off")
    parser.add_argument(
        "--conditions",
        nargs="+",
        choices=sorted(CONDITIONS),
        help="only these conditions (default: pats and the three baselines, plus --ablations)",
    )
    args = parser.parse_args(argv)
    b, key = BUDGETS[args.budget], budget_key(args)
    out = args.out or REPO / "bench" / "runs" / "learning" / key
    conditions = tuple(args.conditions or ("pats", *BASELINES, *(ABLATIONS if args.ablations else ())))
    units = UnitCosts(turn_s=args.turn_s, decision_s=args.decision_s)
    total, per = estimate(b, conditions, units)
    print(
        f"budget {key}: {asdict(b)}\nconditions {', '.join(conditions)}; estimate {total / 3600:.2f} h "
        f"({', '.join(f'{c} {s / 60:.0f} min' for c, s in per.items())}; {units})\nshows: {b.shows}",
        flush=True,
    )
    if args.report_only and not any((out / f"{c}-s{s}").is_dir() for c in conditions for s in b.seeds):
        # Rewriting the committed table from nothing would lose it: the run dirs live only where they ran.
        parser.error(
            f"--report-only reads the run dirs under {out}, and there are none; they exist only on the "
            f"machine that trained (the committed result is {args.results / f'learning_{key}.json'}). "
            "Give --out where the run dirs are, or drop --report-only to train."
        )
    started = time.perf_counter()
    if not args.report_only:
        run_all(b, conditions, out, args.setting, args.reward, extra=tuple(args.set))
    elapsed = time.perf_counter() - started
    summary = summarize(out, b, conditions)
    text = tables(summary, b)
    args.results.mkdir(parents=True, exist_ok=True)
    old = args.results / f"learning_{key}.json"
    previous = json.loads(old.read_text()) if old.is_file() else {}
    png = args.results / f"learning_{key}.png"
    plot(summary, png, out, b)
    for row in summary["conditions"].values():
        row.pop("_outcomes")
    result = {
        "budget": key,
        "sizes": asdict(b),
        "set": args.set,  # --set overrides: they win over the sizes above (e.g. trainer.steps)
        "machine": f"{os.cpu_count()} cores",
        "estimate_s": total,
        # --report-only keeps the training time of the invocation that trained
        "seconds_this_invocation": elapsed
        if not args.report_only
        else previous.get("seconds_this_invocation"),
        "run_dirs": str(out),
        **summary,
        "targets": targets(summary),
    }
    path = write_result(f"learning_{key}", result, args.results)
    print(text)
    print("\n".join(["", *result["targets"]]))
    print(f"took {elapsed:.0f} s (estimate {total:.0f} s); wrote {path} and {png}")


if __name__ == "__main__":
    main()
