"""`pats compare RUN_OR_SWEEP...`: the table on stdout, and comparison.md, comparison.csv, curves.png."""

from __future__ import annotations

import argparse
from pathlib import Path

from pats.stats import DRAWS


def add_compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare runs or sweeps by condition, with intervals over seeds and games",
        description="Group runs by condition (a run's name without its -s<seed>) and print one row each: "
        "held-out success without and with the scaffold and the reliance gap (95% intervals over seeds "
        "and games), train success, informative groups, groups shown a plan, prompt tokens, scaffold size, "
        "edits and removals; "
        "an untrained row from the cells' evaluations before training (eval.at_start); then each "
        "condition minus each baseline, paired by seed and game; notes name the seeds each column rests "
        "on, sweep cells with no run, and seeds whose cells ran on different machines. Writes comparison.md, "
        "comparison.csv and curves.png to --out. See docs/ablations.md.",
    )
    p.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP", help="run folders and sweep folders")
    p.add_argument("--baseline", action="append", help="a condition differences are taken against; "
                   "repeat it for several (`untrained` names the untrained row; default: the one condition "
                   "without a scaffold, if there is exactly one)")  # fmt: skip
    p.add_argument("--out", help="where the files go (default: SWEEP/compare for one sweep, else ./compare)")
    p.add_argument("--draws", type=int, default=DRAWS, help=f"bootstrap draws (default {DRAWS})")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from pats.compare.output import csv_text, markdown, plot
    from pats.compare.runs import read_run, run_dirs, unread_cells
    from pats.compare.table import compare

    records = [read_run(d) for d in run_dirs(args.paths)]
    result = compare(records, args.baseline, args.draws, unread_cells(args.paths))
    out = _out_folder(args.paths, args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(result)
    (out / "comparison.md").write_text(text, encoding="utf-8")
    (out / "comparison.csv").write_text(csv_text(result), encoding="utf-8")
    plot(records, out / "curves.png")
    print(text)
    print(f"wrote {out / 'comparison.md'}, {out / 'comparison.csv'}, {out / 'curves.png'}")
    return 0


def _out_folder(paths: list[str], out: str | None) -> Path:
    """--out, else one sweep folder's compare/, else ./compare."""
    if out:
        return Path(out)
    if len(paths) == 1 and not (Path(paths[0]) / "spec.yaml").is_file():
        return Path(paths[0]) / "compare"
    return Path("compare")
