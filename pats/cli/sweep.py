"""`pats sweep`'s arguments: spec files, at most one sweep file, KEY=VALUE overrides (KEY=a,b,c and
KEY=range(0,4) sweep, as Hydra's --multirun writes them) and flags; `pats sweep status SWEEP`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pats.errors import UsageError

EXAMPLES = """examples:
  pats sweep experiments/ablations/no_removal.yaml experiments/baselines/grpo.yaml --seeds 0-3 trainer.steps=32
  pats sweep experiments/quickstart.yaml trainer.lr=1e-4,3e-4 seed=range(0,4)   # 2 conditions x 4 seeds
  pats sweep experiments/sweeps/ablations.yaml             # a sweep file: specs, seeds, overrides, grid
  pats sweep experiments/sweeps/ablations.yaml --parallel 2  # 2 cells at once on a local Ray
  pats sweep experiments/sweeps/ablations.yaml --ray auto  # each cell a Ray task on the running cluster
  pats sweep status runs/sweeps/ablations                  # each cell's status, times, error and log
  pats compare runs/sweeps/ablations --baseline quickstart-grpo"""


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a grid of specs x seeds x overrides, one resumable run per cell",
        description="Run every spec (one condition each; a grid multiplies them) with every seed, each "
        "cell in its own run directory under <root>/<name>/ (sweep.json lists them, paths relative to "
        "that folder), one after another here or, with --ray/--parallel, as Ray tasks. Every cell is "
        "validated, and every LLM the cells call answers one request, before any runs. Rerun the same "
        "command to continue: finished cells are skipped, interrupted ones resumed from their last "
        "checkpoint. Each cell's output also goes to CELL/log.txt, its status, times and error to "
        "CELL/status.json (`pats sweep status SWEEP`). A failed cell is reported and the others go on "
        "(exit code 1 if any failed). Each cell's W&B run is in the group named after the sweep. "
        "See docs/ablations.md.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "items",
        nargs="+",
        metavar="SPEC|SWEEP|KEY=VALUE",
        help="spec files, a sweep file, overrides: KEY=a,b,c or KEY=range(0,4) is a grid key (a condition "
        "per value; [a,b] and 'a,b' stay one value), seed=... the seeds; or `status SWEEP_FOLDER`",
    )
    p.add_argument("--seeds", help="e.g. 0-3 or 0,2,5 (default: the sweep file's, else 0)")
    p.add_argument("--name", help="the sweep's folder and W&B group (default: the sweep file's name, else "
                   "one derived from the grid, the same for the same command)")  # fmt: skip
    p.add_argument("--root", help="where sweep folders go, relative to here (default runs/sweeps, or the "
                   "sweep file's root:, which is relative to the file)")  # fmt: skip
    p.add_argument("--ray", metavar="ADDRESS", help="run each cell as a Ray task: `local` starts Ray on this "
                   "machine (sized to it) and stops it at the end; auto, host:6379 or ray://host:10001 use a "
                   "running cluster, whose run folders must be on storage every node sees. Needs Ray: "
                   "pip install -e '.[sweep]'")  # fmt: skip
    p.add_argument("--parallel", type=int, metavar="N", help="--ray local with each cell asking for 1/N of "
                   "this machine's CPUs, GPUs and memory: N cells at once")  # fmt: skip
    p.add_argument("--cpus", type=float, help="CPUs each cell's Ray task asks for (default 1). Under Ray a "
                   "cell whose spec leaves trainer.threads unset trains with that many threads")  # fmt: skip
    p.add_argument("--gpus", type=float, help="GPUs each cell's Ray task asks for (default 0)")
    p.add_argument("--memory", type=float, metavar="GIB", help="GiB of memory each cell's Ray task asks "
                   "for (default: no ask)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="list the cells (validated) and run nothing")
    p.set_defaults(func=cmd_sweep)


def sweep_from_args(args: argparse.Namespace):
    """The SweepSpec `pats sweep`'s arguments describe (sweep_of, with the options given)."""
    from pats.cli.args import _split_args

    if args.parallel is not None:
        if args.parallel < 1:
            raise UsageError(
                f"--parallel {args.parallel}: give the number of cells to run at once, 1 or more"
            )
        if args.ray not in (None, "local") or args.cpus is not None or args.gpus is not None:
            raise UsageError("--parallel N runs on a local Ray and shares this machine between N cells: give "
                             "it without --ray ADDRESS, --cpus and --gpus (or give those without --parallel)")  # fmt: skip
    paths, overrides = _split_args(args.items)
    options = {k: getattr(args, k) for k in ("name", "root", "cpus", "gpus", "memory")}
    return sweep_of(paths, overrides, args.seeds, {k: v for k, v in options.items() if v is not None})


def sweep_of(
    paths: list[str], overrides: list[str], seeds: str | None = None, options: dict[str, Any] | None = None
):
    """The SweepSpec of spec files or one sweep file plus command-line overrides, as `pats sweep` and
    `pats validate` read them: the command line's grid keys (KEY=a,b) replace the file's values of the
    same key, a single value replaces a grid key, `seed=...` or `seeds` (as --seeds) sets the seeds."""
    from pats.sweep.grid import is_sweep_file, load_sweep_file, parse_seeds, validated
    from pats.sweep.multirun import split_multirun

    files = [p for p in paths if is_sweep_file(p)]
    if len(files) > 1:
        raise UsageError(f"give one sweep file, not {len(files)}: {files}")
    base: dict[str, Any] = load_sweep_file(files[0]).model_dump() if files else {"specs": ()}
    specs = [*base["specs"], *(p for p in paths if p not in files)]
    if not specs:
        raise UsageError("no spec file given; e.g. `pats sweep experiments/quickstart.yaml --seeds 0-1`")
    given = split_multirun(overrides)
    singles = {o.partition("=")[0].strip() for o in given.overrides}
    grid = {k: v for k, v in base.get("grid", {}).items() if k not in singles} | given.grid
    section = {
        **base,
        "specs": specs,
        "overrides": [*base.get("overrides", ()), *given.overrides],
        "grid": grid,
    }
    if seeds and given.seeds:
        raise UsageError("give the seeds once: --seeds or seed=..., not both")
    if seeds or given.seeds:
        section["seeds"] = parse_seeds(seeds) if seeds else given.seeds
    return validated(section | (options or {}), files[0] if files else "pats sweep")


def cmd_sweep(args: argparse.Namespace) -> int:
    from pats.sweep.grid import cells, sweep_name
    from pats.sweep.run import run_sweep
    from pats.sweep.words import counted

    if args.items[0] == "status" and not Path("status").is_file():
        return cmd_status(args.items[1:])
    sweep = sweep_from_args(args)
    ray = "local" if args.parallel is not None else args.ray
    if args.dry_run:
        from pats.sweep.cluster import asks_for

        planned = cells(sweep, asks_for(sweep, args.parallel).threads if ray else None)
        print(f"sweep {sweep_name(sweep)}: {counted(len(planned), 'cell')}")
        for cell in planned:
            print(f"  {cell.name}: {cell.source} {' '.join(cell.overrides)}")
        return 0

    def say(text: str) -> None:
        print(f"[sweep] {text}", flush=True)

    results = run_sweep(sweep, ray, say, parallel=args.parallel)
    failed = [r for r in results if r.status in ("failed", "refused")]
    for r in failed:
        print(f"error: cell {r.name} {r.status}: {r.error}", file=sys.stderr)
    return 1 if failed else 0


def cmd_status(items: list[str]) -> int:
    from pats.sweep.status import status_table

    if len(items) != 1:
        raise UsageError("give one sweep folder: pats sweep status runs/sweeps/NAME")
    print(status_table(Path(items[0])))
    return 0
