"""Prompt tokens per rollout (the policy's real tokenizer) over training, for each scaffold mode, and
the ratios PATS / grow and PATS / static (target: PATS at most 0.6x of grow; the paper: 32.1% fewer).

It reads the learning benchmark's run directories of the same budget (bench/runs/learning/<budget>),
training any condition that is missing there with the learning benchmark's own runner (without its
held-out evaluation), so running both benchmarks costs the runs once. `train/prompt_tokens` is the
mean over a step's rollouts of the prompt tokens summed over an episode's turns; PATS's probe
rollouts (a quarter of each group, without the scaffold) count as what they cost. Because failed
episodes run all turns, a per-turn figure is printed beside it. Writes bench/results/tokens_<budget>.json.

    python bench/perf/tokens.py --budget small [--report-only]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import BASELINES, REPO, UnitCosts, fmt, read_run, write_result  # noqa: E402
from bench.studies.learning import BUDGETS, add_common_args, budget_key, estimate, run_all  # noqa: E402

MODES = ("none", "static", "grow", "pats")
TARGET_VS_GROW = 0.6


def token_summary(out: Path, seeds, modes=MODES) -> dict:
    """Per mode, means over steps and seeds: prompt tokens per rollout, per scaffolded rollout, per
    turn, and scaffold tokens; then the ratios of pats to the baselines."""
    rows = {}
    for mode in modes:
        steps = [m for s in seeds for _, m in read_run(out / f"{mode}-s{s}")["steps"]]
        if not steps:
            continue
        with_s = [
            m["train_with_scaffold/prompt_tokens"] for m in steps if "train_with_scaffold/prompt_tokens" in m
        ]
        rows[mode] = {
            "steps": len(steps),
            "per_rollout": fmean(m["train/prompt_tokens"] for m in steps),
            "per_scaffolded_rollout": fmean(with_s) if with_s and mode != "none" else None,
            "per_turn": fmean(m["train/prompt_tokens"] / max(m["train/turns"], 1e-9) for m in steps),
            "scaffold_tokens": fmean(m.get("scaffold/tokens", 0.0) for m in steps),
        }
    ratios = {}
    for base in ("grow", "static", "none"):
        if "pats" in rows and base in rows:
            ratios[f"pats/{base}"] = {
                k: mine / theirs
                for k in ("per_rollout", "per_turn")
                if (theirs := rows[base][k]) and (mine := rows["pats"][k]) is not None
            }
    return {"modes": rows, "ratios": ratios}


def table(summary: dict) -> str:
    lines = [
        "| mode | step-runs | prompt tokens / rollout | / scaffolded rollout | / turn | scaffold tokens |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for mode, r in summary["modes"].items():
        lines.append(
            f"| {mode} | {r['steps']} | {fmt(r['per_rollout'], 0)} | {fmt(r['per_scaffolded_rollout'], 0)} | "
            f"{fmt(r['per_turn'], 1)} | {fmt(r['scaffold_tokens'], 0)} |"
        )
    lines.append("")
    for name, r in summary["ratios"].items():
        target = f" (target <= {TARGET_VS_GROW}x)" if name == "pats/grow" else ""
        lines.append(
            f"{name}: {fmt(r.get('per_rollout'), 2)}x per rollout{target}, {fmt(r.get('per_turn'), 2)}x per turn"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    b, key = BUDGETS[args.budget], budget_key(args)
    out = args.out or REPO / "bench" / "runs" / "learning" / key
    started = time.perf_counter()
    if not args.report_only:
        total, _ = estimate(b, MODES, UnitCosts(turn_s=args.turn_s, decision_s=args.decision_s))
        print(f"budget {key}: runs missing under {out} are trained (all four: at most {total / 3600:.2f} h)")
        run_all(
            b, ("pats", *BASELINES), out, args.setting, args.reward, final_eval=False, extra=tuple(args.set)
        )
    summary = token_summary(out, b.seeds)
    elapsed = time.perf_counter() - started
    path = write_result(
        f"tokens_{key}", {"budget": key, "run_dirs": str(out), "seconds": elapsed, **summary}, args.results
    )
    print(table(summary))
    print(f"took {elapsed:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
