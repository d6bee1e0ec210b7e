"""The items of a command line: spec files and `key=value` overrides, in any order."""

from __future__ import annotations

import re
from pathlib import Path

OVERRIDE = re.compile(r"^[A-Za-z_][\w.\-]*=")  # a dotted key, then the value (which may name a .yaml file)


def _split_args(items: list[str]) -> tuple[list[str], list[str]]:
    """Spec files and `key=value` overrides may be given in any order; an existing file is a spec even
    if its name has an `=`."""
    specs = [i for i in items if not OVERRIDE.match(i) or Path(i).is_file()]
    overrides = [i for i in items if i not in specs]
    return specs, overrides
