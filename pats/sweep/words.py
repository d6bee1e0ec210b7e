"""Words as `pats sweep` prints them: counts ("1 cell", "2 cells") and an error's headline."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """`n` and the noun, with an s unless `n` is 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def headline(error: str) -> str:
    """An error's first line; for a spec error ("1 problem in the spec", its problems on the lines
    after) with its first problem."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and lines[0].endswith(("problem in the spec", "problems in the spec")):
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        return f"{lines[0]}: {lines[1]}{more}"
    return lines[0]
