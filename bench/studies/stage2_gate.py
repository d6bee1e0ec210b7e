"""Stage 2's regime gate (issue 58): at which temperature does plain play starve GRPO while the line does not?

On the Stage 2 pool (twc train 0-31, the reading warm start, the Stage 1 policy and view settings of
experiments/stage1/none.yaml), no training: each of the 32 games is played `--samples` (8) sampled
episodes without guidance (`none`) and with its own whole expert plan shown as the "Next action" line
(`line`: `scaffold.plan_view: next`, the plan as `pats.scaffold.plans.plan_of` writes it, the next step
following the game's state). From each game's success rate p, the expected informative fraction of a
group of 8 is 1 - p^8 - (1-p)^8, averaged over the games (bench/studies/sensitivity.py's `informative`).

A temperature passes when `none` <= NONE_MAX (0.06: plain play rarely gives GRPO a signal) and `line` >=
LINE_MIN (0.30: the line does); the regime is the highest passing temperature in TEMPERATURES, tried
from the highest. A temperature whose `none` cell fails is not played with the line (it cannot pass).
Training games only: no dev or test game is played, so choosing the regime does not tune on held-out
games. Each cell writes bench/results/stage2_gate/T<t>-<kind>.json when it finishes (commit it), and
each round of it (one episode a game) T<t>-<kind>.round<k>.json until then (commit those too: a rerun
on another machine resumes at the next round); a rerun plays only the missing cells and rounds; `--report-only` prints the table and the pick from the files.

    python bench/studies/stage2_gate.py                  # niced and in the background; resumable
    python bench/studies/stage2_gate.py --report-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS  # noqa: E402

CELLS = RESULTS / "stage2_gate"
SPEC = REPO / "experiments" / "stage1" / "none.yaml"  # the Stage 1 policy, pool and view settings
TEMPERATURES = (1.0, 0.7, 0.5)  # tried from the highest
KINDS = ("none", "line")
NONE_MAX, LINE_MIN = 0.06, 0.30  # expected informative fraction of groups of 8 (issue 58)
GROUP = 8


def informative(p: float, g: int = GROUP) -> float:
    """The chance that a group of g episodes of a game won with probability p holds a win and a loss."""
    return 1 - p**g - (1 - p) ** g


def cell_path(temperature: float, kind: str) -> Path:
    return CELLS / f"T{temperature}-{kind}.json"


def gate_spec(temperature: float, threads: int):
    from pats.spec import load_spec

    return load_spec(
        SPEC,
        [
            f"policy.temperature={temperature}",
            f"trainer.threads={threads}",
            "logging.wandb=disabled",
            "eval.greedy=false",
            "eval.samples_per_task=1",
        ],  # fmt: skip
    )


async def play_cell(temperature: float, kind: str, args) -> dict:
    """One cell: the pool's games x `samples` episodes, without guidance or with the whole-plan line.
    Played in rounds of one episode a game, each sampled from its own seed (the spec's seed x 100 +
    the round) and saved as it ends (`round_path`), so a stopped cell resumes at its next round."""
    from bench.studies.sensitivity import Probe

    spec = gate_spec(temperature, args.threads)
    probe = Probe("twc", SimpleNamespace(probe_offset=0, tasks=args.tasks, sources=0, samples=args.samples),
                  spec=spec)  # fmt: skip
    start = time.time()
    per_task: dict[str, list[float]] = {t.id: [] for t in probe.probe_tasks}
    views: list = []
    try:
        entries = await line_entries(probe) if kind == "line" else {t.id: [] for t in probe.probe_tasks}
        views = probe.views(entries)
        for k in range(args.samples):
            path = round_path(temperature, kind, k)
            if not path.is_file():
                probe.backend.policy.generator.manual_seed(spec.seed * 100 + k)
                played = await probe.backend.evaluate(probe.probe_tasks, views)
                won = {r.task_id: float(r.success) for r in played}
                path.write_text(json.dumps(won) + "\n")
            for task_id, success in json.loads(path.read_text()).items():
                per_task[task_id].append(success)
    finally:
        await probe.close()
    rates = [sum(v) / len(v) for v in per_task.values()]
    return {
        "temperature": temperature,
        "kind": kind,
        "spec": str(SPEC.relative_to(REPO)),
        "games": [t.id for t in probe.probe_tasks],
        "episodes": sum(len(v) for v in per_task.values()),
        "successes": int(sum(sum(v) for v in per_task.values())),
        "seeding": "round k of a game sampled from seed x 100 + k (older cells: one seed for all rounds)",
        "games_won": sum(r > 0 for r in rates),
        "per_task": per_task,
        "informative_g8": sum(informative(p) for p in rates) / len(rates),
        "plans_cut": sum(v.cut_steps > 0 for v in views),
        "line_examples": sorted({v.text for v in views if v.text})[:2],
        "seconds": round(time.time() - start, 1),
    }


async def line_entries(probe) -> dict[str, list]:
    """task id -> the line's one entry: the game's whole expert plan (`plan_of`), task-scoped; no entry
    for a game whose expert plan does not win when replayed."""
    from bench.studies.sensitivity import entry
    from pats.scaffold.plans import key_actions, plan_of

    entries: dict[str, list] = {}
    for t in probe.probe_tasks:
        plan = await probe.verified_plan(t)
        text = "Steps to try: " + key_actions(plan_of(plan)) if plan else ""
        entries[t.id] = [entry("plan", f"task:{t.id}", text, probe.count(text))] if text else []
    return entries


def round_path(temperature: float, kind: str, k: int) -> Path:
    """One round's outcomes (task id -> won) of a cell still being played."""
    return CELLS / f"T{temperature}-{kind}.round{k}.json"


def load(temperature: float, kind: str) -> dict | None:
    path = cell_path(temperature, kind)
    return json.loads(path.read_text()) if path.is_file() else None


def verdict(temperature: float) -> str:
    """pass / fail / open (a cell it needs is missing) for one temperature."""
    none, line = load(temperature, "none"), load(temperature, "line")
    if none is not None and none["informative_g8"] > NONE_MAX:
        return "fail"
    if none is None or line is None:
        return "open"
    return "pass" if line["informative_g8"] >= LINE_MIN else "fail"


def report() -> str:
    rows = ["| T | none: won / episodes (games won) | none: informative g8 | line: won / episodes (games won) "
            "| line: informative g8 | verdict |", "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for t in TEMPERATURES:
        cells = [load(t, k) for k in KINDS]
        shown = [
            (f"{c['successes']}/{c['episodes']} ({c['games_won']})", f"{c['informative_g8']:.3f}")
            if c else ("-", "-")
            for c in cells
        ]  # fmt: skip
        rows.append(f"| {t} | {shown[0][0]} | {shown[0][1]} | {shown[1][0]} | {shown[1][1]} | {verdict(t)} |")
    picked = next((t for t in TEMPERATURES if verdict(t) == "pass"), None)
    pending = any(
        verdict(t) == "open" for t in TEMPERATURES[: TEMPERATURES.index(picked) if picked else None]
    )
    bars = (
        f"pass: none <= {NONE_MAX}, line >= {LINE_MIN} (expected informative fraction of groups of {GROUP})"
    )
    pick = (
        "regime: not decided (a higher temperature's cells are missing)" if pending
        else f"regime: T{picked}" if picked is not None
        else "regime: none of the temperatures passes (try twc with 3 items, then stop and report)"
    )  # fmt: skip
    return "\n".join([*rows, "", bars, pick])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--tasks", type=int, default=32, help="pool games (train 0..tasks-1)")
    p.add_argument("--samples", type=int, default=8, help="sampled episodes per game (a group's size)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--temperatures", type=float, nargs="+", default=TEMPERATURES, choices=TEMPERATURES,
                   help="play only these temperatures' cells (several processes can share the work)")  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="print the table from the cell files")
    args = p.parse_args(argv)
    if not args.report_only:
        CELLS.mkdir(parents=True, exist_ok=True)
        for t in args.temperatures:
            for kind in KINDS:
                if load(t, kind) is not None or verdict(t) == "fail":
                    continue
                result = asyncio.run(play_cell(t, kind, args))
                cell_path(t, kind).write_text(json.dumps(result, indent=1) + "\n")
                for k in range(args.samples):  # the cell holds them all now
                    round_path(t, kind, k).unlink(missing_ok=True)
                print(f"T{t} {kind}: {result['successes']}/{result['episodes']}, informative g8 "
                      f"{result['informative_g8']:.3f} ({result['seconds']} s)", flush=True)  # fmt: skip
            if verdict(t) == "pass":
                break  # the highest passing temperature is the regime: lower ones are not needed
    print(report())


if __name__ == "__main__":
    main()
