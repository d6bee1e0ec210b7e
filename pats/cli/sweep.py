"""`pats sweep`'s arguments: spec files, at most one sweep file, KEY=VALUE overrides and flags."""

from __future__ import annotations

import argparse
import sys

from pats.errors import SpecError

EXAMPLES = """examples:
  pats sweep experiments/ablations/no_removal.yaml experiments/baselines/grpo.yaml --seeds 0-3 trainer.steps=32
  pats sweep experiments/sweeps/ablations.yaml             # a sweep file: specs, seeds, overrides, grid
  pats sweep experiments/sweeps/ablations.yaml --ray auto  # each cell a Ray task on the running cluster
  pats compare runs/sweeps/ablations --baseline quickstart-grpo"""


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a grid of specs x seeds x overrides, one resumable run per cell",
        description="Run every spec (one condition each; a grid in a sweep file multiplies them) with "
        "every seed, each cell in its own run directory under <root>/<name>/ (sweep.json lists them), "
        "one after another here or, with --ray, as Ray tasks on an existing cluster. Every cell is "
        "validated before any runs. Rerun the same command to continue: finished cells are skipped, "
        "interrupted ones resumed from their last checkpoint. A failed cell is reported and the others "
        "go on (exit code 1 if any failed). Each cell's W&B run is in the group named after the sweep.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "items", nargs="+", metavar="SPEC|SWEEP|KEY=VALUE", help="spec files, a sweep file, overrides"
    )
    p.add_argument("--seeds", help="e.g. 0-3 or 0,2,5 (default: the sweep file's, else 0)")
    p.add_argument("--name", help="the sweep's folder and W&B group (default: the sweep file's name, else "
                   "one derived from the grid, the same for the same command)")  # fmt: skip
    p.add_argument("--root", help="where sweep folders go (default runs/sweeps)")
    p.add_argument("--ray", metavar="ADDRESS", help="run each cell as a Ray task on the cluster at ADDRESS "
                   "(auto, host:6379 or ray://host:10001); run folders must be on storage every node sees")  # fmt: skip
    p.add_argument("--cpus", type=float, help="CPUs each cell's Ray task asks for (default 1)")
    p.add_argument("--gpus", type=float, help="GPUs each cell's Ray task asks for (default 0)")
    p.add_argument("--dry-run", action="store_true", help="list the cells (validated) and run nothing")
    p.set_defaults(func=cmd_sweep)


def sweep_from_args(args: argparse.Namespace):
    """The SweepSpec the arguments describe: a sweep file's, with the command line's additions."""
    from pats.cli.args import _split_args
    from pats.sweep.grid import is_sweep_file, load_sweep_file, parse_seeds, validated

    paths, overrides = _split_args(args.items)
    files = [p for p in paths if is_sweep_file(p)]
    if len(files) > 1:
        raise SpecError(f"give one sweep file, not {len(files)}: {files}")
    base = load_sweep_file(files[0]).model_dump() if files else {"specs": ()}
    specs = [*base["specs"], *(p for p in paths if p not in files)]
    if not specs:
        raise SpecError("no spec file given; e.g. `pats sweep experiments/quickstart.yaml --seeds 0-1`")
    section = {**base, "specs": specs, "overrides": [*base.get("overrides", ()), *overrides]}
    if args.seeds:
        section["seeds"] = parse_seeds(args.seeds)
    for key in ("name", "root", "cpus", "gpus"):
        if getattr(args, key) is not None:
            section[key] = getattr(args, key)
    return validated(section, files[0] if files else "pats sweep")


def cmd_sweep(args: argparse.Namespace) -> int:
    from pats.sweep.grid import cells, sweep_name
    from pats.sweep.run import run_sweep

    sweep = sweep_from_args(args)
    if args.dry_run:
        planned = cells(sweep)
        print(f"sweep {sweep_name(sweep)}: {len(planned)} cells")
        for cell in planned:
            print(f"  {cell.name}: {cell.source} {' '.join(cell.overrides)}")
        return 0

    def say(text: str) -> None:
        print(f"[sweep] {text}", flush=True)

    results = run_sweep(sweep, args.ray, say)
    failed = [r for r in results if r.status == "failed"]
    for r in failed:
        print(f"error: cell {r.name} failed: {r.error}", file=sys.stderr)
    return 1 if failed else 0
