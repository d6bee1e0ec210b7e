"""Stage 2's with-line check (issue 58, docs/journal/2026-12-06-stage2.md, secondary, read and not
tested): after training, does each cell's policy still read the whole-plan line?

Each adapter plays dev 320-335 (16 of the held-out games, the first of the grid's evaluation set) with
the game's own whole expert plan shown as the "Next action" line (`scaffold.plan_view: next`, the plan as
`pats.scaffold.plans.plan_of` writes it, the next step following the game's state: the regime gate's
`line` kind, bench/studies/stage2_gate.py), `--samples` (4) sampled episodes a game at the grid's
temperature. The adapters: `untrained` (the reading warm start the grid starts from) and every grid cell
whose final adapter is committed (bench/results/sweeps/stage2/<cell>/adapter, scripts/commit-cell).
Every adapter plays the same draws (round k of every adapter from seed x 100 + k), so the rows are paired
by game and round.

Beside each row: the same games' success without the line at the cell's last evaluation (its
events.jsonl; for `untrained`, the evaluation before training of the grid's seed-0 none cell), so the
line's lift after training reads against the lift before it.

Each adapter writes bench/results/stage2_with_line/<adapter>.json when it finishes (commit it), and
<adapter>.round<k>.json per round until then (commit those too: a rerun resumes at the next round); a
rerun plays only the missing adapters and rounds; `--report-only` prints the table from the files.
Run it from the grid's pinned checkout, as the grid (docs/journal/2026-12-06-stage2.md), so every adapter
is played by the same code: each file records the commit its pats came from.

    nice -n 10 .venv/bin/python bench/studies/stage2_with_line.py               # resumable
    .venv/bin/python bench/studies/stage2_with_line.py --report-only
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

OUT = RESULTS / "stage2_with_line"
SPEC = REPO / "experiments" / "stage2" / "none.yaml"  # the grid's policy, view and temperature
GRID = RESULTS / "sweeps" / "stage2"
FIRST, GAMES = 320, 16  # dev 320-335
UNTRAINED = "untrained"


def adapters() -> dict[str, Path | None]:
    """name -> adapter folder (None: the spec's own init_adapter, the reading warm start)."""
    found: dict[str, Path | None] = {UNTRAINED: None}
    for cell in sorted(GRID.glob("stage2-*")):
        if (cell / "adapter").is_dir():
            found[cell.name] = cell / "adapter"
    return found


def line_spec(adapter: Path | None, threads: int):
    from pats.spec import load_spec

    overrides = [f"trainer.threads={threads}", "logging.wandb=disabled", "eval.greedy=false",
                 "eval.samples_per_task=1"]  # fmt: skip
    if adapter is not None:
        overrides.append(f"policy.init_adapter={adapter}")
    return load_spec(SPEC, overrides)


def round_path(name: str, k: int) -> Path:
    return OUT / f"{name}.round{k}.json"


async def play(name: str, adapter: Path | None, args) -> dict:
    """One adapter: the 16 games x `samples` episodes with the whole-plan line, in rounds of one
    episode a game, each round saved as it ends."""
    from bench.studies.sensitivity import Probe
    from bench.studies.stage2_gate import line_entries

    spec = line_spec(adapter, args.threads)
    probe = Probe("twc", SimpleNamespace(probe_offset=0, tasks=0, sources=0, samples=args.samples), spec=spec)
    probe.probe_tasks = probe.env.tasks("eval")[FIRST : FIRST + GAMES]  # held-out games, not the pool
    start = time.time()
    per_task: dict[str, list[float]] = {t.id: [] for t in probe.probe_tasks}
    try:
        entries = await line_entries(probe)  # the regime gate's line
        views = probe.views(entries)
        for k in range(args.samples):
            path = round_path(name, k)
            if not path.is_file():
                probe.backend.policy.generator.manual_seed(spec.seed * 100 + k)
                played = await probe.backend.evaluate(probe.probe_tasks, views)
                path.write_text(json.dumps({r.task_id: float(r.success) for r in played}) + "\n")
            for task_id, success in json.loads(path.read_text()).items():
                per_task[task_id].append(success)
    finally:
        await probe.close()
    return {
        "adapter": name,
        "adapter_path": relative(Path(adapter or str(spec.policy.init_adapter))),
        "spec": str(SPEC.relative_to(REPO)),
        "temperature": spec.policy.temperature,
        "games": [t.id for t in probe.probe_tasks],
        "games_with_a_plan": sum(bool(e) for e in entries.values()),
        "episodes": sum(len(v) for v in per_task.values()),
        "successes": int(sum(sum(v) for v in per_task.values())),
        "seeding": "round k of every adapter sampled from seed x 100 + k",
        "pats_commit": pats_commit(),
        "per_task": per_task,
        "plans_cut": sum(v.cut_steps > 0 for v in views),
        "seconds": round(time.time() - start, 1),
    }


def relative(path: Path) -> str:
    """The path from the checkout's root when it lies under it (unresolved: the grid's folder may be a
    link into another checkout), else as given."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def pats_commit() -> str:
    """The commit of the checkout whose pats this process imported (the grid's runs from a pinned one)."""
    import subprocess

    import pats

    folder = Path(pats.__file__).resolve().parents[1]
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def without_line(name: str, games: list[str]) -> tuple[int, int] | None:
    """(won, episodes) on `games` without guidance at the cell's last evaluation (for `untrained`: the
    seed-0 none cell's evaluation before training); None when that log is not there."""
    from pats.logging.events import EvalEvent, read_events

    cell = GRID / ("stage2-none-s0" if name == UNTRAINED else name)
    log = cell / "events.jsonl"
    if not log.is_file():
        return None
    evals = [e for e in read_events(log, EvalEvent) if e.outcomes]
    if not evals:
        return None
    chosen = evals[0] if name == UNTRAINED else evals[-1]
    if name == UNTRAINED and chosen.step != -1:
        return None  # the log holds no evaluation before training
    outcomes = [x for g in games for x in chosen.outcomes.get(g, ())]
    return int(sum(outcomes)), len(outcomes)


def report() -> str:
    rows = ["| adapter | with the line: won / episodes (games won) | without it, same games | plans cut |",
            "| --- | --- | --- | --- |"]  # fmt: skip
    for name in adapters():
        path = OUT / f"{name}.json"
        if not path.is_file():
            rows.append(f"| {name} | not played | - | - |")
            continue
        r = json.loads(path.read_text())
        won_games = sum(any(v) for v in r["per_task"].values())
        base = without_line(name, r["games"])
        shown = f"{base[0]}/{base[1]}" if base else "not recorded"
        rows.append(
            f"| {name} | {r['successes']}/{r['episodes']} ({won_games}) | {shown} | {r['plans_cut']} |"
        )
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--samples", type=int, default=4, help="sampled episodes per game")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument(
        "--adapters", nargs="+", help="play only these (default: untrained and every cell with an adapter)"
    )
    p.add_argument("--report-only", action="store_true", help="print the table from the files")
    args = p.parse_args(argv)
    if not args.report_only:
        OUT.mkdir(parents=True, exist_ok=True)
        found = adapters()
        unknown = sorted(set(args.adapters or ()) - set(found))
        if unknown:
            sys.exit(f"no committed adapter for {', '.join(unknown)}; known: {', '.join(found)}")
        for name in args.adapters or found:
            if (OUT / f"{name}.json").is_file():
                continue
            result = asyncio.run(play(name, found[name], args))
            (OUT / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            for k in range(args.samples):  # the file holds them all now
                round_path(name, k).unlink(missing_ok=True)
            print(f"{name}: {result['successes']}/{result['episodes']} with the line ({result['seconds']} s)",
                  flush=True)  # fmt: skip
    print(report())


if __name__ == "__main__":
    main()
