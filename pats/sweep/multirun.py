"""Grids on `pats sweep`'s command line, written as Hydra's `--multirun` writes them.

`KEY=a,b,c` is a grid key with three values (each a condition of every spec); `KEY=range(0,4)` is
0, 1, 2, 3 (`range(start, stop[, step])`, integers, the stop left out as in Python and Hydra); a value
in brackets (`KEY=[a,b]`, a list) or in quotes (`KEY='a,b'`) stays one value. `seed=...` gives the
sweep's seeds (the same as `--seeds`). What is found here goes into the sweep's `grid:` (or `seeds:`) and
is validated there like a sweep file's: every cell is loaded with its values before anything runs.
Hydra's other sweep functions (`choice`, `glob`, `interval`) are not read: such a value is one value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pats.errors import SpecError, SpecIssue

RANGE = re.compile(r"range\((.*)\)", re.DOTALL)
OPEN, CLOSE = "[{(", "]})"


@dataclass(frozen=True)
class Multirun:
    """The command line's overrides split: single values, grid keys and their values, seeds."""

    overrides: tuple[str, ...]  # KEY=VALUE, one value each
    grid: dict[str, tuple[str, ...]]
    seeds: tuple[int, ...] | None  # from seed=..., None when not given


def split_multirun(items: Sequence[str]) -> Multirun:
    """KEY=VALUE items -> single overrides, grid and seeds; every malformed sweep reported at once."""
    overrides: list[str] = []
    grid: dict[str, tuple[str, ...]] = {}
    seeds: tuple[int, ...] | None = None
    issues: list[SpecIssue] = []
    for text in items:
        key, _, value = (part.strip() for part in text.partition("="))
        try:
            values = sweep_values(value)
        except ValueError as err:
            issues.append(SpecIssue(key, str(err), f"override '{text}'"))
            continue
        if key == "seed":
            try:
                seeds = tuple(dict.fromkeys(int(v) for v in values or (value,)))
            except ValueError:
                issues.append(SpecIssue(key, "seeds are whole numbers: seed=0,1,2 or seed=range(0,4)", f"override '{text}'"))  # fmt: skip
        elif values is None:
            overrides.append(text)
        elif key in grid:
            issues.append(SpecIssue(key, "is swept twice; give its values once: KEY=a,b,c", f"override '{text}'"))  # fmt: skip
        else:
            grid[key] = values
    if issues:
        raise SpecError(issues, file="pats sweep")
    return Multirun(tuple(overrides), grid, seeds)


def sweep_values(value: str) -> tuple[str, ...] | None:
    """A value's sweep (`a,b,c` or `range(...)`), or None when it is one value. ValueError says what
    to write instead."""
    match = RANGE.fullmatch(value)
    if match:
        return _range(match[1])
    parts = _top_level_split(value)
    if len(parts) == 1:
        return None
    if any(not p for p in parts):
        raise ValueError(f"'{value}' has an empty value between commas; write KEY=a,b,c")
    if len(set(parts)) < len(parts):
        raise ValueError(f"'{value}' repeats a value; give each once")
    return tuple(parts)


def _range(args: str) -> tuple[str, ...]:
    hint = "write range(start, stop) or range(start, stop, step) with whole numbers, e.g. range(0,4)"
    try:
        numbers = [int(a) for a in args.split(",")]
    except ValueError:
        raise ValueError(f"range({args}): {hint} (or list other values: KEY=1e-4,3e-4)") from None
    if not 1 <= len(numbers) <= 3 or (len(numbers) == 3 and numbers[2] == 0):
        raise ValueError(f"range({args}): {hint}")
    values = tuple(str(n) for n in range(*numbers))
    if not values:
        raise ValueError(f"range({args}) is empty (the stop is left out): {hint}")
    return values


def _top_level_split(value: str) -> list[str]:
    """`value` split at its commas outside brackets and quotes, each part stripped."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in value:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in OPEN:
            depth += 1
        elif char in CLOSE:
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return parts
