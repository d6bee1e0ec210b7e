"""`pats data list` and `pats data fetch NAME...`: the `data` subcommand, registered by pats.cli."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pats.data.catalog import BY_NAME

MIRROR_ENV = "PATS_DATA_MIRROR"


def add_data_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="list the data the shipped specs need, and fetch it",
        description="`pats data list [SPEC...]`: each data set and whether it is under the data root "
        "($PATS_DATA, default ~/.cache/pats/data), and what each spec (default experiments/**/*.yaml) "
        "reads from it. `pats data fetch NAME...`: download data sets from their public sources at pinned "
        "commits (or from --mirror), check every sha256, and put them under the data root.",
    )
    what = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    listing = what.add_parser("list", help="what each spec needs, where it is looked for, found or not")
    listing.add_argument(
        "specs", nargs="*", metavar="SPEC", help="spec files (default experiments/**/*.yaml)"
    )
    listing.set_defaults(func=run_list)
    fetch = what.add_parser("fetch", help=f"download data sets: {', '.join(BY_NAME)}")
    fetch.add_argument("names", nargs="+", metavar="NAME", choices=sorted(BY_NAME), help=", ".join(BY_NAME))
    fetch.add_argument(
        "--mirror",
        default=os.environ.get(MIRROR_ENV),
        metavar="URL",
        help=f"a server with the data root's layout to download from instead (default ${MIRROR_ENV})",
    )
    fetch.set_defaults(func=run_fetch)


def run_list(args: argparse.Namespace) -> int:
    from pats.data.needs import list_text, shipped_specs

    print(list_text([Path(s) for s in args.specs] or shipped_specs()))
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from pats.data.fetch import fetch
    from pats.places import data_root

    root = data_root()
    fetch(args.names, root, args.mirror)
    print(f"data root: {root}" + ("" if os.environ.get("PATS_DATA") else " (set PATS_DATA to use another)"))
    return 0
